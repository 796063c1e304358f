"""Text to audio: voice backends behind one batch interface. Pure compute.

Nothing under ``engine/`` imports Kafka, S3, Redis or Prometheus (tests/unit/test_layering.py).
"""

from engine.audio import decode, encode, join, resample
from engine.base import Audio, Failure, ModelInfo, SynthItem
from engine.engine import Engine
from engine.registry import load_engine

__all__ = ["Audio", "Engine", "Failure", "ModelInfo", "SynthItem", "decode", "encode", "join", "load_engine",
           "resample"]
