"""A bad-speech control for the Mandarin intelligibility check: espeak-ng's formant Mandarin (``cmn``).

``espeakng-loader`` (PyPI) ships libespeak-ng and its data; this calls the library through ctypes
(synchronous mode, samples collected by a callback), so no binary or download is needed.
``speak(text)`` returns (float32 samples, sample rate). Used where a test must show that the
check tells robotic, barely intelligible Mandarin from the voice under test.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

__all__ = ["available", "speak"]

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_ESPEAK_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("espeakng_loader") is not None


@functools.lru_cache(maxsize=1)
def _lib() -> tuple[Any, int]:
    import espeakng_loader

    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    sr = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
    if sr <= 0:
        raise RuntimeError("espeak-ng failed to initialize")
    if lib.espeak_SetVoiceByName(b"cmn") != 0:
        raise RuntimeError("espeak-ng has no cmn voice")
    return lib, int(sr)


def speak(text: str) -> tuple[np.ndarray, int]:
    lib, sr = _lib()
    chunks: list[np.ndarray] = []

    def on_audio(wav: Any, n: int, _events: Any) -> int:
        if n > 0 and wav:
            chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).astype(np.float32) / 32768.0)
        return 0

    cb = _CALLBACK(on_audio)
    lib.espeak_SetSynthCallback(cb)
    data = text.encode("utf-8") + b"\0"
    rc = lib.espeak_Synth(ctypes.c_char_p(data), ctypes.c_size_t(len(data)), ctypes.c_uint(0),
                               ctypes.c_int(_POS_CHARACTER), ctypes.c_uint(0), ctypes.c_uint(_ESPEAK_CHARS_UTF8),
                               None, None)
    if rc != 0:
        raise RuntimeError(f"espeak-ng synthesis failed ({rc})")
    lib.espeak_Synchronize()
    return (np.concatenate(chunks) if chunks else np.zeros(0, np.float32)), sr
