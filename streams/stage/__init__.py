"""The CPU stream stage on faust-streaming (``ttsflow stage``).

Consumes ``settings.topic_requests`` (raw bytes, key = user id) and, for each record,
in partition order:

1. **Validate.** No readable ``request_id`` (not JSON, not an object, id missing or not
   matching the v1 pattern): a :class:`~schemas.DeadLetter` with the raw key and value
   (base64), source topic/partition/offset, its identity ``id`` (the same on a re-sent
   copy; also the ``ttsflow-dead-letter-id`` header) and a reason (``empty_value``,
   ``invalid_json``, ``no_request_id``) goes to ``settings.topic_dlq``, keyed like the
   original. A readable id with bad content: a :class:`~schemas.Rejection` on
   ``settings.topic_segments`` with a stable ``error.code`` (``invalid_json``,
   ``invalid_field`` whose message starts with the field name, ``empty_text``,
   ``text_too_long``, ``unknown_voice``, ``unsupported_format``,
   ``unsupported_language``), keyed like the request (by the user id it names when the
   record has no key; to the source partition when it names none either). The stage never
   writes ``tts.completed``: a worker answers the rejection in its transaction, once.
2. **Normalize, split, hash** (:mod:`streams.stage.text`, :func:`schemas.segment_hash` over the
   normalized segment text, voice, model = ``settings.backend``, ``settings.model_version``,
   speed, sample rate and format; :func:`schemas.request_hash` over the parts).
3. **Produce** one :class:`~schemas.Segment` per segment to ``settings.topic_segments``
   with the request's own record key (so the segment for user U lands in the partition
   number U's request came from: every producer partitions with murmur2, aiokafka's
   default), in ``seq`` order; the last carries ``parts``, all part hashes.

No exception escapes the agent for a bad record: decoding raises only
:class:`~schemas.SchemaError`, and an unexpected error in the pure per-record code is
answered like bad content (failed completion ``internal_error`` or dead letter
``stage_error``) and counted, so the next record is processed. Kafka errors are not
swallowed: they crash the worker, which exits non-zero for the orchestrator to restart.

**Duplicates.** A faust Table ``seen``, rebuilt from its
compacted changelog on start and on rebalance (``TTS_STAGE_STORE``: in memory, or in
RocksDB on disk, which restarts from its own files), holds one entry per (record key,
request id) in a time bucket one window wide (:mod:`streams.stage.dedup`): a request's
cost never grows with its user's history. A Table's changelog record is written to the
partition of the event being processed, so a user's entries live in the same partition
as the user's requests and move with it. A request id seen for the same key within
``settings.dedup_window_s`` produces nothing (counted); buckets older than the previous
one are dropped from the local store and expire from the changelog by retention. Failed
requests are recorded too, so every readable request id gets exactly one verdict from
the stage. Ids are per user: the same id from two users is two requests.

**Admission.** A new request of a user (record key) past its token bucket (``TTS_USER_REQUESTS_PER_S``
beyond ``TTS_USER_REQUEST_BURST``, refilled by the records' timestamps) is refused with
``rate_limited`` instead of split: a flood is answered, not queued (:mod:`streams.stage.admission`).

What the stage guarantees under kills, and the faust patches that make it so:
:mod:`streams.stage.patches`.

Rooms: :mod:`~streams.stage.core` (pure per-record logic), :mod:`~streams.stage.text`
(normalize, split), :mod:`~streams.stage.dedup` (the dedup table's keys),
:mod:`~streams.stage.watch` (input watchdog), :mod:`~streams.stage.voicemap` (a request's per-language
voices: checked, the text cut into runs), :mod:`~streams.stage.patches` (faust /
aiokafka patches), :mod:`~streams.stage.app` (faust wiring), :mod:`~streams.stage.main`
(process start-up), :mod:`~streams.stage.metrics`.
"""
