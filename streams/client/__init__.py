"""The ttsflow client: publish requests, wait for their completions, fetch the audio.

:mod:`~streams.client.sync` (``TTSClient``), :mod:`~streams.client.aio` (``AsyncTTSClient``),
:mod:`~streams.client.history` (probes and look-ups in ``tts.completed`` without a client),
:mod:`~streams.client.audio` (fetch and verify audio, write it atomically),
:mod:`~streams.client.chunks` and :mod:`~streams.client.readers` (the readers underneath),
:mod:`~streams.client.cli` (``ttsflow say / submit / watch / fetch``).
"""

from streams.client.aio import AsyncTTSClient
from streams.client.audio import fetch_audio, fetch_chunk
from streams.client.errors import (
    AudioFetchError,
    ClientError,
    CompletionTimeout,
    NoWords,
    RequestFailed,
    StackUnavailable,
)
from streams.client.history import find_completion, pipeline_problems, probe_kafka, tail_completions
from streams.client.sync import TTSClient

__all__ = ["AsyncTTSClient", "AudioFetchError", "ClientError", "CompletionTimeout", "NoWords", "RequestFailed",
           "StackUnavailable",
           "TTSClient", "fetch_audio", "fetch_chunk", "find_completion", "pipeline_problems", "probe_kafka",
           "tail_completions"]
