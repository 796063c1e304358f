"""The ttsflow client: publish requests, wait for their completions, fetch the audio.

:mod:`~streams.client.sdk` (``TTSClient``, ``AsyncTTSClient`` and helpers),
:mod:`~streams.client.cli` (``ttsflow say / submit / watch / fetch``).
"""

from streams.client.errors import AudioFetchError, ClientError, CompletionTimeout, RequestFailed, StackUnavailable
from streams.client.sdk import (
    AsyncTTSClient,
    TTSClient,
    fetch_audio,
    fetch_chunk,
    find_completion,
    pipeline_problems,
    probe_kafka,
    tail_completions,
)

__all__ = ["AsyncTTSClient", "AudioFetchError", "ClientError", "CompletionTimeout", "RequestFailed", "StackUnavailable",
           "TTSClient", "fetch_audio", "fetch_chunk", "find_completion", "pipeline_problems", "probe_kafka",
           "tail_completions"]
