"""The one settings object of a ttsflow process.

Read once at start from ``TTS_``-prefixed environment variables, optionally overridden by
CLI flags, then frozen. Every field is declared once, in the section of the component that
uses it (``settings.kafka``, ``settings.s3``, ``settings.redis``, ``settings.stage``,
``settings.batching``, ``settings.engine``, ``settings.scaling``, ``settings.process``,
``settings.local_stack``, ``settings.gateway``), with a description, a default that works
against the local stack (``ttsflow stack up``) and bounds. A field's variable is ``TTS_``
and its name upper-cased (``TTS_MAX_BATCH`` for ``batching.max_batch``); field names are
unique across sections, so :func:`load_settings` and :meth:`Settings.replace` take them flat.

Guarantees: each section checks its bounds, choices, secrets and cross-field rules when it
is built, so a bad value stops the process at load with one clear line instead of failing
later in the hot path; the sections are built once and a component takes only the one it
needs. Nothing else in ttsflow reads ``os.environ``; engine and storage take plain
constructor arguments built from this. :func:`describe` lists every field for the docs.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.registry import BACKENDS
from streams.errors import SettingsError

__all__ = ["BatchingSettings", "EngineSettings", "FieldDoc", "GatewaySettings", "KafkaSettings", "LocalStackSettings",
           "ProcessSettings", "RedisSettings", "S3Settings", "ScalingSettings", "Secret", "Settings", "SettingsError",
           "StageSettings", "describe", "load_settings"]

_PREFIX = "TTS_"
_HOME_SHOWN = "~/.local/share/ttsflow"


def _f(default: Any, doc: str, *, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"doc": doc, "lo": lo, "hi": hi, "choices": choices})


class Secret(str):
    """A password or key: the value itself (it is a ``str``, handed to clients as is) with a
    masked ``repr``, so a settings object or section printed in a log, a traceback or
    ``stack status`` never shows it. Code that must send the value calls :meth:`reveal`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Secret('***')" if self else "Secret('')"

    def reveal(self) -> str:
        """The value as a plain ``str``."""
        return str.__str__(self)


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Secrets whose ``*_file`` wins over a given value (the value has a local-stack default).
_FILE_WINS = frozenset({"s3_secret_key"})


def _env_name(name: str) -> str:
    return _PREFIX + name.upper()


def _default_home() -> str:
    return str(Path.home() / ".local" / "share" / "ttsflow")


def _check(section: Any) -> None:
    """What every section checks when built: a ``Secret`` field stays masked whichever way it
    came in (a plain str through ``replace``) and is read from its ``<name>_file`` when that is
    set and the value is not given; then every field's bounds and choices."""
    for f in dataclasses.fields(section):
        if f.type in (Secret, "Secret"):
            value, path = getattr(section, f.name), getattr(section, f.name + "_file")
            if path and (not value or f.name in _FILE_WINS):
                value = _read_secret_file(f.name + "_file", path)
            object.__setattr__(section, f.name, Secret(value))
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        lo, hi, choices = f.metadata["lo"], f.metadata["hi"], f.metadata["choices"]
        if lo is not None and value < lo:
            raise SettingsError(f"{_env_name(f.name)}={value} is below the minimum {lo}")
        if hi is not None and value > hi:
            raise SettingsError(f"{_env_name(f.name)}={value} is above the maximum {hi}")
        if choices is not None and value not in choices:
            raise SettingsError(f"{_env_name(f.name)}={value!r} is not one of {', '.join(choices)}")


def _read_secret_file(name: str, path: str) -> Secret:
    try:
        return Secret(Path(path).read_text().rstrip("\r\n"))
    except OSError as e:
        raise SettingsError(f"{_env_name(name)}={path}: cannot read it ({e.strerror})") from None


def _check_files_exist(section: Any, *names: str) -> None:
    for name in names:
        path = getattr(section, name)
        if path and not Path(path).is_file():
            raise SettingsError(f"{_env_name(name)}={path}: no such file")


# --- sections: one per component, each field declared once ----------------------------------------

@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Kafka: the cluster, ttsflow's topics, the worker group and its transactions, and how every
    client authenticates (a SASL protocol needs a user and password; certificates need TLS)."""

    bootstrap_servers: str = _f("127.0.0.1:9092", "Kafka bootstrap servers, comma separated.")
    topic_requests: str = _f("tts.requests", "Topic users publish requests to (key = user id).")
    topic_segments: str = _f("tts.segments", "Internal topic of segment events (key = user id).")
    topic_completed: str = _f("tts.completed", "Topic of completion events, ok or failed.")
    topic_dlq: str = _f("tts.requests.dlq", "Dead-letter topic for requests without a readable request_id.")
    topic_done: str = _f("tts.worker.done", "Compacted topic of completed request ids, written in the worker's transaction.")
    topic_chunks: str = _f("tts.chunks", "Topic of per-segment audio chunks of streaming requests (key = user id), written in the worker's transaction.")
    topic_lexicons: str = _f("tts.lexicons", "Compacted topic of users' pronunciation lexicons (W3C PLS; key owner/name, a tombstone deletes), materialized by the stage.")
    topic_lexicons_global: str = _f("tts.lexicons.global", "Compacted topic of global lexicons (key global/name), written by operators only (ACL: the ops principal), materialized by the stage.")
    partitions: int = _f(4, "Partitions of every ttsflow topic created by the stack; caps worker parallelism.", lo=1, hi=10_000)
    replication_factor: int = _f(1, "Replication factor of created topics (1 on the local single-node stack).", lo=1, hi=16)
    worker_group: str = _f("ttsflow-workers", "Consumer group of the synthesis workers.")
    transactional_id_prefix: str = _f("", "Prefix of the default transactional ids of this worker group (grant the group TransactionalId by PREFIXED pattern <prefix>-); empty means the worker group.")
    transactional_id: str = _f("", "Stable transactional.id of this worker, used as given; empty means <transactional_id_prefix>-<hostname>-<lowest slot free on this host for this cluster and prefix> (side-by-side workers never fence each other, a restarted one takes its predecessor's id).")
    worker_slots: int = _f(0, "Serving workers of this group per host (with claimed ids, TTS_TRANSACTIONAL_ID empty); 0: no limit. Above 0, a worker started while all of them are held is a warm standby: it loads and warms its model and readies its own transactional producer, then takes over the first slot freed (a serving worker killed or stopped) within milliseconds, as that slot's group member, instead of a restart's load; the dead worker's open transaction is ended beside it. Costs a model's memory and its load's CPU per standby.", lo=0, hi=256)
    group_instance_id: str = _f("", "Static group member id of this worker (group.instance.id: a restart under it gets its partitions back without a rebalance); empty means its transactional id, or with TTS_WORKER_SLOTS its serving slot's <prefix>-<hostname>-<slot>.")
    transaction_timeout_ms: int = _f(60_000, "Kafka transaction timeout of the worker's producer.", lo=1_000, hi=900_000)
    worker_commit_interval_ms: int = _f(50, "Longest a worker's finished segments wait for a transaction that commits their offsets, milliseconds; answers and stream chunks start one as soon as none is in flight (one at a time, on its own thread). Lower commits progress sooner at a few ms of broker and client CPU per transaction.", lo=1, hi=60_000)
    kafka_debug: str = _f("", "librdkafka debug contexts for ttsflow's own Kafka clients (worker, tools; not faust's), e.g. cgrp,eos,protocol to see a consumer group or a transaction at work; written to stderr. Empty: off.")
    kafka_security_protocol: str = _f("PLAINTEXT", "How every ttsflow client reaches Kafka (worker, stage, client, lag exporter, admin, benchmarks): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (Confluent Cloud, MSK with SCRAM: SASL_SSL).",
                                      choices=KAFKA_PROTOCOLS)
    kafka_sasl_mechanism: str = _f("SCRAM-SHA-512", "SASL mechanism with a SASL_* protocol: PLAIN (Confluent Cloud API keys), SCRAM-SHA-256 or SCRAM-SHA-512 (MSK SCRAM, Strimzi). AWS IAM and OAUTHBEARER are not supported.",
                                   choices=SASL_MECHANISMS)
    kafka_sasl_username: str = _f("", "SASL username (the principal User:<name> ACLs name); required with a SASL_* protocol.")
    kafka_sasl_password: Secret = _f(Secret(""), "SASL password; never logged or shown. Prefer TTS_KAFKA_SASL_PASSWORD_FILE.")  # noqa: RUF009 (a frozen str, like the others)
    kafka_sasl_password_file: str = _f("", "File holding the SASL password (a mounted Kubernetes Secret); used when TTS_KAFKA_SASL_PASSWORD is empty.")
    kafka_ssl_ca_file: str = _f("", "PEM file of the CA(s) that signed the brokers' certificates (SSL, SASL_SSL); empty means the system's trust store.")
    kafka_ssl_cert_file: str = _f("", "PEM client certificate for mutual TLS (the principal is its subject); needs TTS_KAFKA_SSL_KEY_FILE.")
    kafka_ssl_key_file: str = _f("", "PEM private key (unencrypted) of TTS_KAFKA_SSL_CERT_FILE.")

    def __post_init__(self) -> None:
        _check(self)
        if self.uses_sasl and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise SettingsError(f"TTS_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs TTS_KAFKA_SASL_USERNAME "
                                "and TTS_KAFKA_SASL_PASSWORD (or TTS_KAFKA_SASL_PASSWORD_FILE)")
        if bool(self.kafka_ssl_cert_file) != bool(self.kafka_ssl_key_file):
            raise SettingsError("TTS_KAFKA_SSL_CERT_FILE and TTS_KAFKA_SSL_KEY_FILE go together (mutual TLS)")
        tls_files = ("kafka_ssl_ca_file", "kafka_ssl_cert_file", "kafka_ssl_key_file")
        for name in tls_files:
            if getattr(self, name) and not self.uses_tls:
                raise SettingsError(f"{_env_name(name)} is set but TTS_KAFKA_SECURITY_PROTOCOL="
                                    f"{self.kafka_security_protocol} uses no TLS (SSL or SASL_SSL)")
        _check_files_exist(self, *tls_files)

    @property
    def uses_sasl(self) -> bool:
        return self.kafka_security_protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.kafka_security_protocol in ("SSL", "SASL_SSL")

    @property
    def effective_transactional_id_prefix(self) -> str:
        return self.transactional_id_prefix or self.worker_group

    @property
    def effective_transactional_id(self) -> str:
        """The id a worker uses: given, or claimed at start (``streams.worker.claim_transactional_id``);
        before the claim, the prefix and host without a slot."""
        return self.transactional_id or f"{self.effective_transactional_id_prefix}-{socket.gethostname()}"

    @property
    def effective_group_instance_id(self) -> str:
        """The worker's static group member id: given, else its transactional id."""
        return self.group_instance_id or self.effective_transactional_id


@dataclass(frozen=True, slots=True)
class S3Settings:
    """S3: where audio is stored."""

    s3_endpoint: str = _f("http://127.0.0.1:9000", "S3-compatible endpoint URL.")
    s3_bucket: str = _f("ttsflow-audio", "Bucket holding segment and request audio.")
    s3_access_key: str = _f("ttsflow", "S3 access key id.")
    s3_secret_key: Secret = _f(Secret("ttsflow-local-secret"), "S3 secret access key; never logged or shown.")  # noqa: RUF009 (a frozen str, like the others)
    s3_region: str = _f("us-east-1", "S3 region name.")
    s3_prefix: str = _f("audio/", "Key prefix for audio objects.")
    s3_secret_key_file: str = _f("", "File holding the S3 secret access key (a mounted Kubernetes Secret); overrides TTS_S3_SECRET_KEY.")
    s3_ca_bundle: str = _f("", "PEM CA bundle that verifies an https:// S3 endpoint's certificate (a private CA); empty means the system's trust store.")
    s3_presign_ttl_s: int = _f(0, "When > 0, every ok completion carries audio.url, a presigned GET link to its audio valid this many seconds (fetchable without S3 credentials); 0 disables it.",
                               lo=0, hi=7 * 24 * 3600)

    def __post_init__(self) -> None:
        _check(self)
        _check_files_exist(self, "s3_ca_bundle")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Redis: the segment cache."""

    redis_url: str = _f("redis://127.0.0.1:6379/0", "Redis URL for the audio cache.")
    cache_ttl_s: int = _f(7 * 24 * 3600, "TTL of segment cache entries, seconds.", lo=1, hi=365 * 24 * 3600)
    redis_username: str = _f("", "Redis ACL user (Redis 6+/valkey); empty means the default user (or the URL's).")
    redis_password: Secret = _f(Secret(""), "Redis password (requirepass or the ACL user's); never logged or shown. Prefer TTS_REDIS_PASSWORD_FILE.")  # noqa: RUF009 (a frozen str, like the others)
    redis_password_file: str = _f("", "File holding the Redis password (a mounted Kubernetes Secret); used when TTS_REDIS_PASSWORD is empty.")
    redis_ca_file: str = _f("", "PEM CA that verifies a rediss:// server's certificate; empty means the system's trust store.")

    def __post_init__(self) -> None:
        _check(self)
        _check_files_exist(self, "redis_ca_file")


@dataclass(frozen=True, slots=True)
class StageSettings:
    """The CPU stage: its faust app, input limits and dedup window."""

    stage_app_id: str = _f("ttsflow-stage", "faust app id of the stage: its consumer group and table changelog prefix.")
    stage_guarantee: str = _f("at_least_once", "faust processing guarantee of the stage: at_least_once only (faust's exactly_once crash-loops under SIGKILL, see streams/stage/patches.py, and is refused at load; the worker's transaction and done log make each completion exactly-once).",
                              choices=("at_least_once",))
    stage_commit_interval_ms: int = _f(200, "How often the stage commits the input offsets of the requests it finished, milliseconds (a restarted stage reads again what came after; its dedup table drops the repeats).", lo=10, hi=60_000)
    stage_store: str = _f("memory", "Where the stage keeps its dedup table (one entry per user and request id, rebuilt from its changelog): memory, or rocksdb (on disk under TTS_HOME, for windows holding millions of ids).",
                          choices=("memory", "rocksdb"))
    stage_instance_id: str = _f("", "Static group member id (group.instance.id) of this stage process; empty means <stage_app_id>-<hostname>-<lowest slot free on this host for this cluster and app id>. A restarted stage takes its predecessor's partitions back without a rebalance; never give two processes the same one.")
    max_text_chars: int = _f(100_000, "Longest accepted request text, in characters after normalization.", lo=1, hi=10_000_000)
    max_segment_chars: int = _f(300, "Longest segment the stage emits, in characters.", lo=16, hi=10_000)
    dedup_window_s: int = _f(24 * 3600, "Window in which a repeated request_id is dropped by the stage.", lo=1, hi=30 * 24 * 3600)
    ssml_max_chars: int = _f(200_000, "Longest accepted SSML document (text_type ssml), in characters of markup and text; a longer one fails with invalid_ssml before it is parsed.", lo=16, hi=10_000_000)
    ssml_max_depth: int = _f(32, "Deepest element nesting accepted in an SSML document (invalid_ssml beyond).", lo=2, hi=1_000)
    ssml_max_elements: int = _f(10_000, "Most elements accepted in one SSML document (invalid_ssml beyond).", lo=1, hi=1_000_000)
    lexicon_max_bytes: int = _f(256 * 1024, "Largest lexicon document (PLS), bytes; a larger one is refused when written and ignored by the stage.", lo=1024, hi=900 * 1024)
    lexicon_max_entries: int = _f(5_000, "Most entries (graphemes) in one lexicon.", lo=1, hi=100_000)
    lexicons_per_user: int = _f(100, "Most lexicons one owner may store: the SDK, the CLI and the gateway refuse to write more, and the stage serves an owner's first this many (by last write) and answers a request naming a later one with too_many_lexicons.", lo=1, hi=100_000)
    stream_idle_cut_ms: int = _f(700, "A request sent in pieces: the text held this long without a new piece is spoken up to its last whole word, milliseconds.", lo=50, hi=60_000)
    stream_timeout_s: float = _f(20.0, "A request sent in pieces with no new piece for this long before its final one is closed: failed with stream_timeout (what was spoken stays spoken), seconds.", lo=1.0, hi=3600.0)
    max_open_streams_per_user: int = _f(16, "Requests sent in pieces one user (record key) may have open at once; the next is failed with too_many_streams.", lo=1, hi=1_000_000)
    max_open_streams: int = _f(10_000, "Requests sent in pieces one stage process holds open at once; the next is failed with stage_busy.", lo=1, hi=10_000_000)
    max_stream_pieces: int = _f(20_000, "Pieces one request may be sent in; the request is failed with too_many_pieces past it.", lo=1, hi=10_000_000)
    first_segment_chars: str = _f("han=10,kana=10,hangul=24,other=60", "Fast first audio: the first segment of a streaming request ends at its first clause or sentence boundary within this many characters (else at the last word boundary within them), by script of its text: han (Mandarin), kana (Japanese), hangul (Korean), other. Empty: first segments are cut like the rest.")
    stage_batch_records: int = _f(256, "Input records the stage handles back to back before it waits for their outputs to be delivered and records them (dedup ids, open texts) and their offsets as done; and at least every 50 ms (outputs go out as each record is handled: no answer waits for this). 1 waits for each record's delivery before the next one (a broker round trip per record: one user's flood of requests then holds every other record behind those round trips).", lo=1, hi=100_000)
    stage_poll_records: int = _f(64, "Records the stage takes from its consumer at a time (faust broker_max_poll_records); a partition with more waiting goes to the back of the line after its turn, so a record of another partition waits behind at most about this many of a flooded one's, plus stage_buffer_records.", lo=1, hi=100_000)
    stage_buffer_records: int = _f(128, "Records fetched and queued in front of the stage's agent (faust stream_buffer_maxsize); each waits behind at most this many. Lower: another user's record is reached sooner behind a flood; higher: fewer pauses of the fetch under a steady load.", lo=16, hi=1_000_000)
    stage_linger_ms: int = _f(1, "How long the stage's producer gathers output records (segments, rejections, table changelog records) into one request to the broker, milliseconds (faust producer_linger). Every request's segments wait up to this long before the worker can read them: 5 cost 4-5 ms of each answer's median (docs/concepts/latency.md). 0 sends each as soon as it is made: one produce request per record, whose socket writes took most of the stage's time under a flood of one user's requests (1 drained a 10,000-request flood in 7.8-9.0 s against 6.5-7.4 s at 5).", lo=0, hi=1000)
    stage_held_fetch_ms: int = _f(3, "Longest the stage's consumer waits for records while a partition is held back because the queue in front of the agent is full (faust then asks without it, with a 1-s timeout it would sleep out although the queue drained meanwhile), milliseconds. 1000: faust's own wait (a flooded partition read at a fraction of the stage's speed).", lo=0, hi=1000)
    stage_stall_s: float = _f(30.0, "An assigned input partition with records waiting past what the stage has done, and no progress for this long, is fetched again from its committed offset (the stage restarts itself if that does not move it), seconds. faust can leave a partition unserved or drop a fetched record around a rebalance; this is how long such a request waits at most. Shorter finds it sooner; a partition held back under a flood for longer than this is fetched again needlessly (harmless: the worker drops repeats).", lo=1.0, hi=3600.0)
    max_pieces_ahead: int = _f(64, "Pieces of a request held while an earlier one is missing (out of order); past it the request is failed with piece_gap.", lo=0, hi=100_000)
    user_requests_per_s: float = _f(50.0, "Per-user admission: new requests (whole, or the first piece of one sent in pieces) one user (record key) may start per second on average, by the records' own timestamps; past it and its burst the request is failed at once with rate_limited, so one user's flood is answered instead of queued in front of the other users of its partition (streams/stage/admission.py). 0: no limit.", lo=0.0, hi=1_000_000.0)
    user_request_burst: int = _f(1000, "Per-user admission: new requests one user may start back to back above user_requests_per_s (the bucket's size).", lo=1, hi=10_000_000)

    @property
    def first_budgets(self) -> dict[str, int]:
        """``first_segment_chars`` as {script: characters} (empty: no short first segment)."""
        out: dict[str, int] = {}
        for item in filter(None, (x.strip() for x in self.first_segment_chars.split(","))):
            script, _, n = item.partition("=")
            out[script.strip()] = int(n)
        return out

    def __post_init__(self) -> None:
        try:
            budgets = self.first_budgets
        except ValueError:
            raise SettingsError(f"TTS_FIRST_SEGMENT_CHARS={self.first_segment_chars!r}: expected script=characters, "
                                "comma-separated") from None
        if set(budgets) - {"han", "kana", "hangul", "other"} or any(n < 1 for n in budgets.values()):
            raise SettingsError(f"TTS_FIRST_SEGMENT_CHARS={self.first_segment_chars!r}: scripts are han, kana, hangul, "
                                "other; characters at least 1")
        if self.stage_guarantee == "exactly_once":
            raise SettingsError(
                "TTS_STAGE_GUARANTEE=exactly_once is refused: faust's exactly_once crash-loops and stalls under SIGKILL "
                "(streams/stage/patches.py); use at_least_once: the worker's transaction and its done log "
                "(TTS_TOPIC_DONE) keep each request's completion exactly-once when the stage repeats segments")
        _check(self)


@dataclass(frozen=True, slots=True)
class BatchingSettings:
    """The worker's micro-batches and per-request limits."""

    max_batch: int = _f(8, "Most segments in one engine batch.", lo=1, hi=1024)
    max_wait_ms: int = _f(20, "Longest a segment waits for its batch to fill, milliseconds, while every model lane is busy (see eager_batches).", lo=0, hi=60_000)
    eager_batches: bool = _f(True, "A model lane with nothing to run starts what is batched at once instead of waiting up to max_wait_ms for the batch to fill: batches form only behind busy lanes. Cost: at light load more, smaller model calls (on CPU a batch saves little per segment); false waits max_wait_ms for a fuller batch, which pays on a GPU whose batch of 8 costs about what a batch of 1 does.")
    length_buckets: str = _f("32,64,128,256", "Ascending segment-length bucket edges in characters; batches never mix buckets.")
    max_request_audio_s: int = _f(4 * 3600, "Longest audio one request may produce, seconds; a longer one fails with audio_too_long (split longer texts into several requests).", lo=1, hi=7 * 24 * 3600)
    join_memory_mb: int = _f(32, "Synthesized audio (MiB of samples) a worker keeps in memory per request for its join; the parts beyond it are read back from S3 when the request is joined.", lo=0, hi=65_536)
    fair_slot_ms: int = _f(500, "Fair order in the worker's batcher: one request's segments are spaced this far apart in service order against other requests (earliest due first), or by a segment's measured model time where that is longer (a slow voice), so a short request is not stuck behind a long one and a long one still advances one segment per slot under any load; 0 means arrival order.", lo=0, hi=600_000)
    read_ahead_kb: int = _f(2048, "Segment records (KiB) a worker reads ahead of its model, in all its partitions; past it the partitions holding their share are paused. The whole of a long request (a 100,000-character one is ~350 KiB) and the requests behind it in its partition are read at once, so other users of that partition are served in the fair order instead of waiting until the worker has read that far. Cost: memory for what is read (the records and their front-end output) and the front end of what is read, run on the loop's thread a poll at a time.", lo=16, hi=1_048_576)
    fair_burst_ms: int = _f(500, "A request's first segments whose expected model time adds up to at most this (milliseconds; a segment of unknown cost counts one fair slot) are not paced: a request of a few sentences is served whole, in arrival order, like a task queue serves it, and only the rest of a longer one is paced fair_slot_ms apart. Cost: a short request behind a long one waits for at most this much of the long one's work (divided among the model lanes); 0 paces every segment after the first.", lo=0, hi=600_000)
    short_first: float = _f(0.0, "Shortest request first in the worker's batcher: a request's segments count as arrived later by this many times the request's expected model time (its segment count times this segment's measured cost), at most fair_burst_ms, so among requests waiting together the smaller ones are served first; 0 means arrival order. Cost: under load only (an idle lane starts what waits), a larger request yields to smaller ones that arrive up to that much later.", lo=0.0, hi=100.0)
    backlog_credit_ms: int = _f(5_000, "A partition's backlog when a worker takes it (assigned after a restart or a rebalance, or read again after an aborted transaction) is served in the order it was written, oldest first, not partition by partition in the order it is read: a record written before the partition was taken, and read within this many milliseconds after, counts in the batcher's order as arrived earlier by how long it waited for the worker, at most this much. So the requests a restart kept waiting longest are answered first. 0 orders by read time. Cost: right after a restart, work read then may yield to up to this much older backlog; later records (a deep backlog read after this long) keep read order.", lo=0, hi=600_000)
    max_joins: int = _f(2, "Requests a worker joins (its parts into the request's audio, on the S3 pool it shares with the parts' uploads) at once; the others wait and start one user at a time in rotation, so one user's flood of requests never keeps another user's answer behind all of its joins.", lo=1, hi=1024)
    bulk_delay_ms: int = _f(5_000, "A priority=bulk request's segments count as arrived this much later than interactive ones in the batcher's order: the longest a bulk segment yields to newer interactive work.", lo=0, hi=3_600_000)

    def __post_init__(self) -> None:
        _check(self)
        edges = self.buckets
        if list(edges) != sorted(set(edges)) or not edges or edges[0] < 1:
            raise SettingsError(f"TTS_LENGTH_BUCKETS={self.length_buckets!r} must be ascending positive integers")

    @property
    def buckets(self) -> tuple[int, ...]:
        """``length_buckets`` as integers (ascending, checked when built)."""
        try:
            return tuple(int(x) for x in self.length_buckets.split(",") if x.strip())
        except ValueError as e:
            raise SettingsError(f"TTS_LENGTH_BUCKETS={self.length_buckets!r}: {e}") from None


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine: backend, voice, precision, providers, model store."""

    backend: str = _f("hibari", "Engine backend (the default one when backends lists several).", choices=BACKENDS)
    backends: str = _f("", "Backends one worker serves, comma separated (e.g. hibari,kokoro): a request's voice picks the backend, batches never mix them; the stage accepts the voices of all of them. Empty means backend alone.")
    voice: str = _f("", "Default voice when a request names none; empty means the backend's default.")
    precision: str = _f("auto", "Model precision: auto picks fp16 on GPU, the shipped model on CPU.", choices=("auto", "fp32", "fp16", "int8"))
    providers: str = _f("auto", "onnxruntime execution providers, comma separated, or auto (TensorRT, CUDA, CPU); torch (torch-cuda, torch-cpu) runs the same graph on torch (extra torch).")
    threads: int = _f(0, "Engine intra-op threads (a worker's budget, shared by its model lanes); 0 means all cores.", lo=0, hi=1024)
    model_lanes: int = _f(0, "Model calls a worker runs at once, each on its share of the threads; 0 means auto: 2 when every served backend runs items one by one (hibari, kokoro) and the thread budget is 2 or more (two 1-thread calls made 1.5x the parts per second of one 2-thread call on 2 cores), else 1.", lo=0, hi=64)
    model_dir: str = _f("", "Versioned model store; empty means <home>/models.")
    model_version: str = _f("", "Model version the stage writes into segment hashes and events; the worker keys audio by its own loaded model too.")
    chattts_asset_dir: str = _f("", "chattts backend: local dir holding ChatTTS's asset/ (gpt, tokenizer, *.safetensors); weights are CC BY-NC 4.0, never bundled or downloaded.")
    chattts_speaker: str = _f("", "chattts backend: fixed speaker embedding (the string Chat.sample_random_speaker() prints) or a file holding it; empty draws one from chattts_seed.")
    chattts_seed: int = _f(0, "chattts backend: sampling seed (and the speaker's, when chattts_speaker is empty).", lo=0, hi=2**31 - 1)

    def __post_init__(self) -> None:
        _check(self)
        for b in self.served_backends:
            if b not in BACKENDS:
                raise SettingsError(f"TTS_BACKENDS={self.backends!r}: {b!r} is not one of {', '.join(BACKENDS)}")

    @property
    def served_backends(self) -> tuple[str, ...]:
        """The backends one worker serves, the default first: ``backends`` when set (``backend`` first
        if it is among them), else ``backend`` alone (names checked when built)."""
        names = tuple(dict.fromkeys(b.strip() for b in self.backends.split(",") if b.strip()))
        if not names:
            return (self.backend,)
        return (self.backend, *[b for b in names if b != self.backend]) if self.backend in names else names

    def engine_options(self) -> dict[str, Any]:
        """Backend-specific keyword arguments for ``engine.registry.load_engine`` (chattts: its weights, speaker, seed)."""
        if self.backend != "chattts":
            return {}
        return {"model_path": self.chattts_asset_dir or None,
                "backend_options": {"speaker": self.chattts_speaker, "seed": self.chattts_seed}}


@dataclass(frozen=True, slots=True)
class ScalingSettings:
    """Scaling: the KEDA kafka trigger's thresholds (``ttsflow lag`` computes the same)."""

    lag_threshold: int = _f(500, "KEDA lagThreshold: segments of worker-group lag per desired replica.", lo=1, hi=10_000_000)
    activation_lag_threshold: int = _f(4, "KEDA activationLagThreshold: lag at or below this scales to minReplicaCount; keep >= partitions (an idle transactional partition shows lag 1, its commit marker).", lo=0, hi=10_000_000)

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    """Every process: its metrics port, home directory and log level."""

    metrics_port: int = _f(9108, "Port of this process's Prometheus /metrics endpoint; 0 disables it.", lo=0, hi=65535)
    home: str = _f(_default_home(), "Where the local stack keeps its jars, data and logs.")
    log_level: str = _f("INFO", "Log level.", choices=("DEBUG", "INFO", "WARNING", "ERROR"))

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True, slots=True)
class LocalStackSettings:
    """The local stack's ports (``ttsflow stack``); a port given alone moves its client address
    (:func:`load_settings`)."""

    kafka_port: int = _f(9092, "Local stack: Kafka broker port.", lo=1, hi=65535)
    kafka_controller_port: int = _f(9093, "Local stack: KRaft controller port.", lo=1, hi=65535)
    kafka_brokers: int = _f(1, "Local stack: Kafka brokers, each also a KRaft controller voter (3: replication factor 3, min.insync.replicas 2); broker n listens on TTS_KAFKA_PORT + 10 * (n - 1). Above 1 it also sets TTS_BOOTSTRAP_SERVERS to every broker and TTS_REPLICATION_FACTOR to min(3, brokers) unless those are given.", lo=1, hi=5)
    s3_port: int = _f(9000, "Local stack: S3 server port.", lo=1, hi=65535)
    redis_port: int = _f(6379, "Local stack: Redis port.", lo=1, hi=65535)

    def __post_init__(self) -> None:
        _check(self)

    def broker_ports(self) -> list[tuple[int, int]]:
        """``(client port, controller port)`` of each local broker: broker n (1-based) on
        ``kafka_port + 10 * (n - 1)`` and ``kafka_controller_port + 10 * (n - 1)``."""
        return _broker_ports(self.kafka_port, self.kafka_controller_port, self.kafka_brokers)


def _broker_ports(kafka_port: int, controller_port: int, brokers: int) -> list[tuple[int, int]]:
    return [(kafka_port + 10 * i, controller_port + 10 * i) for i in range(brokers)]


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The OpenAI-compatible HTTP gateway (``ttsflow gateway``)."""

    gateway_host: str = _f("127.0.0.1", "Gateway: address to listen on (0.0.0.0 in a container).")
    gateway_port: int = _f(8000, "Gateway: HTTP port of /v1/audio/speech, the playground, /healthz, /readyz and /metrics.", lo=1, hi=65535)
    gateway_reuse_port: bool = _f(False, "Gateway: bind with SO_REUSEPORT, so several replicas on one host share one port (the kernel spreads connections).")
    gateway_keys_file: str = _f("", "Gateway: JSON file (or mounted Secret) of bearer API keys, {key: user id} or {key: {user, rate_per_s, burst, concurrency}}; empty means open: every caller is TTS_GATEWAY_OPEN_USER (local use only, logged loudly at start).")
    gateway_open_user: str = _f("local", "Gateway: the user id (partition key) of every caller when no key file is configured.")
    gateway_voice_aliases: str = _f("alloy,ash,ballad,coral,echo,fable,nova,onyx,sage,shimmer,verse",
                                    "Gateway: voice names accepted besides the engine's own, comma separated, each alias or alias=voice; an alias without a voice speaks with the default voice.")
    gateway_max_input_chars: int = _f(4096, "Gateway: longest accepted input in characters (OpenAI's limit is 4096); longer answers 413.", lo=1, hi=10_000_000)
    gateway_wait_s: float = _f(120.0, "Gateway: how long a request waits for its completion before answering 504 (with its request id; a retry with the same Idempotency-Key collects the audio later).", lo=0.1, hi=3600)
    gateway_probe_s: float = _f(3.0, "Gateway (and ttsflow say/submit): after this long without a completion, check that the stage and worker groups have members and say so when not.", lo=0.1, hi=600)
    gateway_recent_max: int = _f(10_000, "Gateway: completions kept in memory for retries with an Idempotency-Key (oldest dropped first).", lo=1, hi=10_000_000)
    gateway_lookup_s: int = _f(24 * 3600, "Gateway: how far back a retry whose completion is not in memory looks for it in its user's partition of tts.completed (keep >= TTS_DEDUP_WINDOW_S).", lo=0, hi=30 * 24 * 3600)
    gateway_reader_lookback_s: float = _f(60.0, "Gateway: its completions reader starts this many seconds back, so a completion committed just before (a restart) is still dispatched.", lo=0, hi=24 * 3600)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def aliases(self) -> dict[str, str]:
        """``gateway_voice_aliases`` as {alias: voice}; an alias without ``=voice`` maps to "" (the default voice)."""
        out: dict[str, str] = {}
        for item in self.gateway_voice_aliases.split(","):
            name, _, voice = item.strip().partition("=")
            if name.strip():
                out[name.strip().lower()] = voice.strip()
        return out


@dataclass(frozen=True, slots=True)
class Settings:
    """Every section, built once at load (:func:`load_settings`)."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    s3: S3Settings = field(default_factory=S3Settings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    stage: StageSettings = field(default_factory=StageSettings)
    batching: BatchingSettings = field(default_factory=BatchingSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    scaling: ScalingSettings = field(default_factory=ScalingSettings)
    process: ProcessSettings = field(default_factory=ProcessSettings)
    local_stack: LocalStackSettings = field(default_factory=LocalStackSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)

    @property
    def effective_model_dir(self) -> Path:
        """``engine.model_dir``, or ``<process.home>/models`` when it is empty (the one value drawn from two sections)."""
        return Path(self.engine.model_dir) if self.engine.model_dir else Path(self.process.home) / "models"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed, named flat (``replace(max_batch=3)``); the sections
        they belong to are built again, so bounds are checked again."""
        by_section = _by_section(changes)
        return dataclasses.replace(self, **{sec: dataclasses.replace(getattr(self, sec), **values)
                                            for sec, values in by_section.items()})


_DEFAULTS = Settings()
#: section attribute on Settings -> its class
_SECTIONS: dict[str, type[Any]] = {f.name: type(getattr(_DEFAULTS, f.name)) for f in dataclasses.fields(Settings)}
#: flat field name -> (its section, the field); names are unique across sections (a unit test checks)
_FIELDS: dict[str, tuple[str, dataclasses.Field[Any]]] = {
    f.name: (section, f) for section, cls in _SECTIONS.items() for f in dataclasses.fields(cls)}


def _by_section(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    unknown = set(values) - set(_FIELDS)
    if unknown:
        raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
    out: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        out.setdefault(_FIELDS[name][0], {})[name] = value
    return out


@dataclass(frozen=True, slots=True)
class FieldDoc:
    """One setting, as the docs' configuration reference shows it."""

    env: str  # TTS_MAX_BATCH
    section: str  # batching (settings.batching.max_batch)
    name: str  # max_batch
    type: str  # int, float, bool, str or Secret
    default: str  # as text; the home-dependent default shown as ~/.local/share/ttsflow
    doc: str
    lo: float | None
    hi: float | None
    choices: tuple[str, ...] | None


def describe() -> list[FieldDoc]:
    """Every setting in declaration order (sections in ``Settings`` order): the docs site's
    configuration reference is generated from this."""
    home = _default_home()
    return [FieldDoc(env=_env_name(name), section=section, name=name, type=str(f.type),
                     default=_HOME_SHOWN if str(f.default) == home else str(f.default), doc=f.metadata["doc"],
                     lo=f.metadata["lo"], hi=f.metadata["hi"], choices=f.metadata["choices"])
            for name, (section, f) in _FIELDS.items()]


def _coerce(name: str, raw: str, typ: Any) -> Any:
    try:
        if typ in (int, "int"):
            return int(raw)
        if typ in (float, "float"):
            return float(raw)
        if typ in (Secret, "Secret"):
            return Secret(raw)
        if typ in (bool, "bool"):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        return raw
    except ValueError as e:
        raise SettingsError(f"{_env_name(name)}={raw!r}: {e}") from None


_PORT_ADDRESSES: tuple[tuple[str, str, str], ...] = (
    ("kafka_port", "bootstrap_servers", "127.0.0.1:{}"),
    ("s3_port", "s3_endpoint", "http://127.0.0.1:{}"),
    ("redis_port", "redis_url", "redis://127.0.0.1:{}/0"),
)


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build the settings from ``TTS_*`` variables, then apply non-None overrides (CLI flags,
    named by field: ``max_batch=4``)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {name: _coerce(name, env[_env_name(name)], f.type)
                              for name, (_, f) in _FIELDS.items() if _env_name(name) in env}
    values.update({k: v for k, v in overrides.items() if v is not None})
    # Several local brokers: clients bootstrap from all of them (a restarted process must find the
    # cluster while any one broker is down) and create topics replicated on them.
    brokers = values.get("kafka_brokers", 1)
    if brokers > 1:
        if "bootstrap_servers" not in values:
            kp = values.get("kafka_port", _FIELDS["kafka_port"][1].default)
            cp = values.get("kafka_controller_port", _FIELDS["kafka_controller_port"][1].default)
            values["bootstrap_servers"] = ",".join(f"127.0.0.1:{k}" for k, _ in _broker_ports(kp, cp, brokers))
        values.setdefault("replication_factor", min(3, brokers))
    # A local-stack port given without its client address moves the address with it, so
    # TTS_KAFKA_PORT=19092 alone yields a second stack that clients actually reach.
    for port_name, addr_name, fmt in _PORT_ADDRESSES:
        if port_name in values and addr_name not in values:
            values[addr_name] = fmt.format(values[port_name])
    by_section = _by_section(values)
    return Settings(**{section: cls(**by_section.get(section, {})) for section, cls in _SECTIONS.items()})
