"""The synthesis worker (``ttsflow worker``): segments in, audio in S3, one completion per request, exactly once.

One collaborator per invariant, each module's docstring stating its own:

* :mod:`~streams.worker.loop` -- the shell: the loop in numbered steps, holding the clients
  and threads, handing what they return to the core.
* :mod:`~streams.worker.core` -- the decisions, pure: answers, what is joined, what a
  transaction carries and when one is due.
* :mod:`~streams.worker.checkpoint` -- the transaction's one owner (step 8): it alone begins,
  commits and aborts, and decides abort, retry or a new producer; pipelined, at most one in
  flight on the producer's thread while the loop goes on.
* :mod:`~streams.worker.ledger` -- pure bookkeeping: what was consumed, what is durable,
  what is answerable, what may be committed (with :mod:`~streams.worker.offsets`).
* :mod:`~streams.worker.intake` -- one record decoded into the ledger.
* :mod:`~streams.worker.parts` -- the part maker: cache, batching (:mod:`~streams.worker.batcher`),
  engine, audio check, encode, upload; keys in :mod:`~streams.worker.keys`.
* :mod:`~streams.worker.joiner` -- a request's audio streamed into one object.
* :mod:`~streams.worker.done_log` -- ``tts.worker.done``, written in the transaction, read on assignment.
* :mod:`~streams.worker.reload_gate` -- when a hot reload may swap the model.
* :mod:`~streams.worker.recovery` -- after an abort, a wedged producer, S3 down: redo from committed.
* :mod:`~streams.worker.rebalance` -- what a partition brings when assigned, leaves when revoked.
* :mod:`~streams.worker.answers` -- a completion built from the ledger's request.
* :mod:`~streams.worker.main` -- process start-up; :mod:`~streams.worker.metrics`.

The Kafka side lives in :mod:`streams.kafka` (the transactional producer, the partitioned
consumer). Nothing is imported here: a test of the batcher does not load the engine.
"""

__all__: list[str] = []
