"""The synthesis worker (``ttsflow worker``): segments in, audio in S3, one completion per request, exactly once.

Rooms, each keeping one invariant (its module docstring says which):
:mod:`~streams.worker.loop` (the loop, in numbered steps), :mod:`~streams.worker.main`
(process start-up), :mod:`~streams.worker.batcher` (micro-batches),
:mod:`~streams.worker.offsets` (the committed-offset rule), :mod:`~streams.worker.joiner`
(a request's audio streamed into one object), :mod:`~streams.worker.metrics`.

Nothing is imported here: ``ttsflow stage`` or a test of the batcher does not load the engine.
"""

__all__: list[str] = []
