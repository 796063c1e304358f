"""Text to audio: voice backends behind one batch interface. Pure compute."""
