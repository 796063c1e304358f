"""The one settings object of a ttsflow process.

Read once at start from ``TTS_``-prefixed environment variables (``TTS_MAX_BATCH``
for ``max_batch``), optionally overridden by CLI flags, then frozen. Every field has
a description, a default that works against the local stack (``ttsflow stack up``),
and bounds checked at load: a bad value stops the process with one clear line
instead of failing later in the hot path. Nothing else in ttsflow reads
``os.environ``; engine and storage take plain constructor arguments built from this.

The fields are grouped into frozen sections (:data:`SECTIONS`: ``settings.kafka``,
``settings.s3``, ``settings.redis``, ``settings.stage``, ``settings.batching``,
``settings.engine``, ``settings.scaling``, ``settings.process``, ``settings.local_stack``,
``settings.gateway``),
views with the same field names and values, so a component can take only the section it
needs; the ``TTS_*`` names and the README table come from the flat fields.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from streams.errors import SettingsError

__all__ = ["SECTIONS", "BatchingSettings", "EngineSettings", "GatewaySettings", "KafkaSettings", "LocalStackSettings", "ProcessSettings",
           "RedisSettings", "S3Settings", "ScalingSettings", "Secret", "Settings", "SettingsError", "StageSettings", "load_settings",
           "settings_table", "with_settings_table"]

_PREFIX = "TTS_"
_S = TypeVar("_S")


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


#: Secret fields and the ``*_file`` field that may hold them instead (a mounted Kubernetes Secret).
SECRET_FILES: dict[str, str] = {"kafka_sasl_password": "kafka_sasl_password_file",
                                "s3_secret_key": "s3_secret_key_file",
                                "redis_password": "redis_password_file"}
KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _read_secret_file(name: str, path: str) -> Secret:
    try:
        return Secret(Path(path).read_text().rstrip("\r\n"))
    except OSError as e:
        raise SettingsError(f"TTS_{name.upper()}={path}: cannot read it ({e.strerror})") from None


def _default_home() -> str:
    return str(Path.home() / ".local" / "share" / "ttsflow")


def _buckets(length_buckets: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in length_buckets.split(",") if x.strip())
    except ValueError as e:
        raise SettingsError(f"TTS_LENGTH_BUCKETS={length_buckets!r}: {e}") from None


# --- sections: frozen views of one Settings, one per component -----------------------------------

@dataclass(frozen=True, slots=True)
class KafkaSettings:
    """Kafka: the cluster, ttsflow's topics, the worker group and its transactions."""

    bootstrap_servers: str
    topic_requests: str
    topic_segments: str
    topic_completed: str
    topic_dlq: str
    topic_done: str
    topic_chunks: str
    partitions: int
    replication_factor: int
    worker_group: str
    transactional_id_prefix: str
    transactional_id: str
    transaction_timeout_ms: int
    worker_commit_interval_ms: int
    kafka_security_protocol: str
    kafka_sasl_mechanism: str
    kafka_sasl_username: str
    kafka_sasl_password: Secret
    kafka_sasl_password_file: str
    kafka_ssl_ca_file: str
    kafka_ssl_cert_file: str
    kafka_ssl_key_file: str

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


@dataclass(frozen=True, slots=True)
class S3Settings:
    """S3: where audio is stored."""

    s3_endpoint: str
    s3_bucket: str
    s3_access_key: str
    s3_secret_key: str
    s3_region: str
    s3_prefix: str
    s3_secret_key_file: str
    s3_ca_bundle: str
    s3_presign_ttl_s: int


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Redis: the segment cache."""

    redis_url: str
    cache_ttl_s: int
    redis_username: str
    redis_password: Secret
    redis_password_file: str
    redis_ca_file: str


@dataclass(frozen=True, slots=True)
class StageSettings:
    """The CPU stage: its faust app, input limits and dedup window."""

    stage_app_id: str
    stage_guarantee: str
    stage_commit_interval_ms: int
    stage_store: str
    stage_instance_id: str
    max_text_chars: int
    max_segment_chars: int
    dedup_window_s: int


@dataclass(frozen=True, slots=True)
class BatchingSettings:
    """The worker's micro-batches and per-request limits."""

    max_batch: int
    max_wait_ms: int
    length_buckets: str
    max_request_audio_s: int
    join_memory_mb: int
    fair_slot_ms: int
    bulk_delay_ms: int

    @property
    def buckets(self) -> tuple[int, ...]:
        """``length_buckets`` as integers (``Settings`` checks at load that they ascend)."""
        return _buckets(self.length_buckets)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """The engine: backend, voice, precision, providers, model store."""

    backend: str
    backends: str
    voice: str
    precision: str
    providers: str
    threads: int
    model_lanes: int
    model_dir: str
    model_version: str
    chattts_asset_dir: str
    chattts_speaker: str
    chattts_seed: int

    @property
    def served_backends(self) -> tuple[str, ...]:
        """The backends one worker serves, the default first: ``backends`` when set (``backend`` first
        if it is among them), else ``backend`` alone. ``Settings`` checks the names at load."""
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

    lag_threshold: int
    activation_lag_threshold: int


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    """Every process: its metrics port, home directory and log level."""

    metrics_port: int
    home: str
    log_level: str


@dataclass(frozen=True, slots=True)
class LocalStackSettings:
    """The local stack's ports (``ttsflow stack``)."""

    kafka_port: int
    kafka_controller_port: int
    kafka_brokers: int
    s3_port: int
    redis_port: int

    def broker_ports(self) -> list[tuple[int, int]]:
        """``(client port, controller port)`` of each local broker: broker n (1-based) on
        ``kafka_port + 10 * (n - 1)`` and ``kafka_controller_port + 10 * (n - 1)``."""
        return _broker_ports(self.kafka_port, self.kafka_controller_port, self.kafka_brokers)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """The OpenAI-compatible HTTP gateway (``ttsflow gateway``)."""

    gateway_host: str
    gateway_port: int
    gateway_reuse_port: bool
    gateway_keys_file: str
    gateway_open_user: str
    gateway_voice_aliases: str
    gateway_max_input_chars: int
    gateway_wait_s: float
    gateway_probe_s: float
    gateway_recent_max: int
    gateway_lookup_s: int
    gateway_reader_lookback_s: float

    @property
    def aliases(self) -> dict[str, str]:
        """``gateway_voice_aliases`` as {alias: voice}; an alias without ``=voice`` maps to "" (the default voice)."""
        return _aliases(self.gateway_voice_aliases)


def _aliases(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.split(","):
        name, _, voice = item.strip().partition("=")
        if name.strip():
            out[name.strip().lower()] = voice.strip()
    return out


_BACKEND_NAMES: tuple[str, ...] = ("hibari", "piper", "chattts", "kokoro")

SECTIONS: dict[str, type] = {
    "kafka": KafkaSettings,
    "s3": S3Settings,
    "redis": RedisSettings,
    "stage": StageSettings,
    "batching": BatchingSettings,
    "engine": EngineSettings,
    "scaling": ScalingSettings,
    "process": ProcessSettings,
    "local_stack": LocalStackSettings,
    "gateway": GatewaySettings,
}


@dataclass(frozen=True, slots=True)
class Settings:
    # --- Kafka -------------------------------------------------------------------
    bootstrap_servers: str = _f("127.0.0.1:9092", "Kafka bootstrap servers, comma separated.")
    topic_requests: str = _f("tts.requests", "Topic users publish requests to (key = user id).")
    topic_segments: str = _f("tts.segments", "Internal topic of segment events (key = user id).")
    topic_completed: str = _f("tts.completed", "Topic of completion events, ok or failed.")
    topic_dlq: str = _f("tts.requests.dlq", "Dead-letter topic for requests without a readable request_id.")
    topic_done: str = _f("tts.worker.done", "Compacted topic of completed request ids, written in the worker's transaction.")
    topic_chunks: str = _f("tts.chunks", "Topic of per-segment audio chunks of streaming requests (key = user id), written in the worker's transaction.")
    partitions: int = _f(4, "Partitions of every ttsflow topic created by the stack; caps worker parallelism.", lo=1, hi=10_000)
    replication_factor: int = _f(1, "Replication factor of created topics (1 on the local single-node stack).", lo=1, hi=16)
    stage_app_id: str = _f("ttsflow-stage", "faust app id of the stage: its consumer group and table changelog prefix.")
    stage_guarantee: str = _f("at_least_once", "faust processing guarantee of the stage; exactly_once is faust's, measured broken under SIGKILL (see streams/stage/patches.py).",
                              choices=("exactly_once", "at_least_once"))
    stage_commit_interval_ms: int = _f(200, "How often the stage commits offsets (its transactions under exactly_once): bounds request-to-segment latency.", lo=10, hi=60_000)
    stage_store: str = _f("memory", "Where the stage keeps its dedup table (one entry per user and request id, rebuilt from its changelog): memory, or rocksdb (on disk under TTS_HOME, for windows holding millions of ids).",
                          choices=("memory", "rocksdb"))
    stage_instance_id: str = _f("", "Static group member id (group.instance.id) of this stage process; empty means <stage_app_id>-<hostname>-<lowest slot free on this host for this cluster and app id>. A restarted stage takes its predecessor's partitions back without a rebalance; never give two processes the same one.")
    worker_group: str = _f("ttsflow-workers", "Consumer group of the synthesis workers.")
    transactional_id_prefix: str = _f("", "Prefix of the default transactional ids of this worker group (grant the group TransactionalId by PREFIXED pattern <prefix>-); empty means the worker group.")
    transactional_id: str = _f("", "Stable transactional.id of this worker, used as given; empty means <transactional_id_prefix>-<hostname>-<lowest slot free on this host for this cluster and prefix> (side-by-side workers never fence each other, a restarted one takes its predecessor's id).")
    transaction_timeout_ms: int = _f(60_000, "Kafka transaction timeout of the worker's producer.", lo=1_000, hi=900_000)
    worker_commit_interval_ms: int = _f(50, "Longest a worker's finished segments wait for a transaction that commits their offsets, milliseconds; answers and stream chunks start one as soon as none is in flight (one at a time, on its own thread). Lower commits progress sooner at a few ms of broker and client CPU per transaction.", lo=1, hi=60_000)
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
    # --- S3 ----------------------------------------------------------------------
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
    # --- Redis -------------------------------------------------------------------
    redis_url: str = _f("redis://127.0.0.1:6379/0", "Redis URL for the audio cache.")
    cache_ttl_s: int = _f(7 * 24 * 3600, "TTL of segment cache entries, seconds.", lo=1, hi=365 * 24 * 3600)
    redis_username: str = _f("", "Redis ACL user (Redis 6+/valkey); empty means the default user (or the URL's).")
    redis_password: Secret = _f(Secret(""), "Redis password (requirepass or the ACL user's); never logged or shown. Prefer TTS_REDIS_PASSWORD_FILE.")  # noqa: RUF009 (a frozen str, like the others)
    redis_password_file: str = _f("", "File holding the Redis password (a mounted Kubernetes Secret); used when TTS_REDIS_PASSWORD is empty.")
    redis_ca_file: str = _f("", "PEM CA that verifies a rediss:// server's certificate; empty means the system's trust store.")
    # --- Text limits -------------------------------------------------------------
    max_text_chars: int = _f(100_000, "Longest accepted request text, in characters after normalization.", lo=1, hi=10_000_000)
    max_segment_chars: int = _f(300, "Longest segment the stage emits, in characters.", lo=16, hi=10_000)
    dedup_window_s: int = _f(24 * 3600, "Window in which a repeated request_id is dropped by the stage.", lo=1, hi=30 * 24 * 3600)
    max_request_audio_s: int = _f(4 * 3600, "Longest audio one request may produce, seconds; a longer one fails with audio_too_long (split longer texts into several requests).", lo=1, hi=7 * 24 * 3600)
    join_memory_mb: int = _f(32, "Synthesized audio (MiB of samples) a worker keeps in memory per request for its join; the parts beyond it are read back from S3 when the request is joined.", lo=0, hi=65_536)
    # --- Batching ----------------------------------------------------------------
    max_batch: int = _f(8, "Most segments in one engine batch.", lo=1, hi=1024)
    max_wait_ms: int = _f(20, "Longest a segment waits for its batch to fill, milliseconds.", lo=0, hi=60_000)
    length_buckets: str = _f("32,64,128,256", "Ascending segment-length bucket edges in characters; batches never mix buckets.")
    fair_slot_ms: int = _f(500, "Fair order in the worker's batcher: one request's segments are spaced this far apart in service order against other requests (earliest due first), or by a segment's measured model time where that is longer (a slow voice), so a short request is not stuck behind a long one and a long one still advances one segment per slot under any load; 0 means arrival order.", lo=0, hi=600_000)
    bulk_delay_ms: int = _f(5_000, "A priority=bulk request's segments count as arrived this much later than interactive ones in the batcher's order: the longest a bulk segment yields to newer interactive work.", lo=0, hi=3_600_000)
    # --- Engine ------------------------------------------------------------------
    backend: str = _f("hibari", "Engine backend (the default one when backends lists several).", choices=_BACKEND_NAMES)
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
    # --- Scaling (KEDA kafka trigger; ttsflow lag) --------------------------------
    lag_threshold: int = _f(500, "KEDA lagThreshold: segments of worker-group lag per desired replica.", lo=1, hi=10_000_000)
    activation_lag_threshold: int = _f(4, "KEDA activationLagThreshold: lag at or below this scales to minReplicaCount; keep >= partitions (an idle transactional partition shows lag 1, its commit marker).", lo=0, hi=10_000_000)
    # --- Processes ---------------------------------------------------------------
    metrics_port: int = _f(9108, "Port of this process's Prometheus /metrics endpoint; 0 disables it.", lo=0, hi=65535)
    home: str = _f(_default_home(), "Where the local stack keeps its jars, data and logs.")
    log_level: str = _f("INFO", "Log level.", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    # --- Local stack ports -------------------------------------------------------
    kafka_port: int = _f(9092, "Local stack: Kafka broker port.", lo=1, hi=65535)
    kafka_controller_port: int = _f(9093, "Local stack: KRaft controller port.", lo=1, hi=65535)
    kafka_brokers: int = _f(1, "Local stack: Kafka brokers, each also a KRaft controller voter (3: replication factor 3, min.insync.replicas 2); broker n listens on TTS_KAFKA_PORT + 10 * (n - 1). Above 1 it also sets TTS_BOOTSTRAP_SERVERS to every broker and TTS_REPLICATION_FACTOR to min(3, brokers) unless those are given.", lo=1, hi=5)
    s3_port: int = _f(9000, "Local stack: S3 server port.", lo=1, hi=65535)
    redis_port: int = _f(6379, "Local stack: Redis port.", lo=1, hi=65535)
    # --- Gateway (ttsflow gateway: OpenAI's POST /v1/audio/speech) -------------------
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
    gateway_reader_lookback_s: float = _f(60.0, "Gateway: its completions reader starts this many seconds back, so a completion committed just before (a restart) is still dispatched.", lo=0, hi=24 * 3600)
    gateway_lookup_s: int = _f(24 * 3600, "Gateway: how far back a retry whose completion is not in memory looks for it in its user's partition of tts.completed (keep >= TTS_DEDUP_WINDOW_S).", lo=0, hi=30 * 24 * 3600)

    def __post_init__(self) -> None:
        # secrets stay masked whichever way they came in (a plain str through replace()), and a
        # *_file names where one is when its value is not given
        for name, file_field in SECRET_FILES.items():
            value, path = getattr(self, name), getattr(self, file_field)
            if path and (not value or name == "s3_secret_key"):
                value = _read_secret_file(file_field, path)
            if not isinstance(value, Secret):
                value = Secret(value)
            object.__setattr__(self, name, value)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            lo, hi, choices = f.metadata["lo"], f.metadata["hi"], f.metadata["choices"]
            if lo is not None and value < lo:
                raise SettingsError(f"TTS_{f.name.upper()}={value} is below the minimum {lo}")
            if hi is not None and value > hi:
                raise SettingsError(f"TTS_{f.name.upper()}={value} is above the maximum {hi}")
            if choices is not None and value not in choices:
                raise SettingsError(f"TTS_{f.name.upper()}={value!r} is not one of {', '.join(choices)}")
        for b in self.engine.served_backends:
            if b not in _BACKEND_NAMES:
                raise SettingsError(f"TTS_BACKENDS={self.backends!r}: {b!r} is not one of {', '.join(_BACKEND_NAMES)}")
        edges = self.buckets
        if list(edges) != sorted(set(edges)) or not edges or edges[0] < 1:
            raise SettingsError(f"TTS_LENGTH_BUCKETS={self.length_buckets!r} must be ascending positive integers")
        self._check_security()

    def _check_security(self) -> None:
        sasl = self.kafka_security_protocol.startswith("SASL_")
        if sasl and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise SettingsError(f"TTS_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs TTS_KAFKA_SASL_USERNAME "
                                "and TTS_KAFKA_SASL_PASSWORD (or TTS_KAFKA_SASL_PASSWORD_FILE)")
        if bool(self.kafka_ssl_cert_file) != bool(self.kafka_ssl_key_file):
            raise SettingsError("TTS_KAFKA_SSL_CERT_FILE and TTS_KAFKA_SSL_KEY_FILE go together (mutual TLS)")
        tls = self.kafka_security_protocol in ("SSL", "SASL_SSL")
        for name in ("kafka_ssl_ca_file", "kafka_ssl_cert_file", "kafka_ssl_key_file"):
            path = getattr(self, name)
            if path and not tls:
                raise SettingsError(f"TTS_{name.upper()} is set but TTS_KAFKA_SECURITY_PROTOCOL="
                                    f"{self.kafka_security_protocol} uses no TLS (SSL or SASL_SSL)")
        for name in ("kafka_ssl_ca_file", "kafka_ssl_cert_file", "kafka_ssl_key_file", "s3_ca_bundle", "redis_ca_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise SettingsError(f"TTS_{name.upper()}={path}: no such file")

    # Derived values -----------------------------------------------------------------
    @property
    def buckets(self) -> tuple[int, ...]:
        return _buckets(self.length_buckets)

    @property
    def effective_transactional_id_prefix(self) -> str:
        return self.kafka.effective_transactional_id_prefix

    @property
    def effective_transactional_id(self) -> str:
        """:attr:`KafkaSettings.effective_transactional_id` of this settings' kafka section."""
        return self.kafka.effective_transactional_id

    @property
    def effective_model_dir(self) -> Path:
        return Path(self.model_dir) if self.model_dir else Path(self.home) / "models"

    # Sections (same values, grouped; each component takes the one it needs) ------------------------
    @property
    def kafka(self) -> KafkaSettings:
        return self._section(KafkaSettings)

    @property
    def s3(self) -> S3Settings:
        return self._section(S3Settings)

    @property
    def redis(self) -> RedisSettings:
        return self._section(RedisSettings)

    @property
    def stage(self) -> StageSettings:
        return self._section(StageSettings)

    @property
    def batching(self) -> BatchingSettings:
        return self._section(BatchingSettings)

    @property
    def engine(self) -> EngineSettings:
        return self._section(EngineSettings)

    @property
    def scaling(self) -> ScalingSettings:
        return self._section(ScalingSettings)

    @property
    def process(self) -> ProcessSettings:
        return self._section(ProcessSettings)

    @property
    def local_stack(self) -> LocalStackSettings:
        return self._section(LocalStackSettings)

    @property
    def gateway(self) -> GatewaySettings:
        return self._section(GatewaySettings)

    def _section(self, cls: type[_S]) -> _S:
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]

    @property
    def served_backends(self) -> tuple[str, ...]:
        """:attr:`EngineSettings.served_backends` of this settings' engine section."""
        return self.engine.served_backends

    def engine_options(self) -> dict[str, Any]:
        """:meth:`EngineSettings.engine_options` of this settings' engine section."""
        return self.engine.engine_options()

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed (bounds checked again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(env name, default, description) for every field: the README's table."""
        return [(f"TTS_{f.name.upper()}", str(f.default), f.metadata["doc"]) for f in dataclasses.fields(cls)]


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
        raise SettingsError(f"{_PREFIX}{name.upper()}={raw!r}: {e}") from None


_PORT_ADDRESSES: tuple[tuple[str, str, str], ...] = (
    ("kafka_port", "bootstrap_servers", "127.0.0.1:{}"),
    ("s3_port", "s3_endpoint", "http://127.0.0.1:{}"),
    ("redis_port", "redis_url", "redis://127.0.0.1:{}/0"),
)


def _broker_ports(kafka_port: int, controller_port: int, brokers: int) -> list[tuple[int, int]]:
    return [(kafka_port + 10 * i, controller_port + 10 * i) for i in range(brokers)]


def _default_of(name: str) -> Any:
    return next(f.default for f in dataclasses.fields(Settings) if f.name == name)


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build the settings from ``TTS_*`` variables, then apply non-None overrides (CLI flags)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        key = _PREFIX + f.name.upper()
        if key in env:
            values[f.name] = _coerce(f.name, env[key], f.type)
    values.update({k: v for k, v in overrides.items() if v is not None})
    # Several local brokers: clients bootstrap from all of them (a restarted process must find the
    # cluster while any one broker is down) and create topics replicated on them.
    brokers = values.get("kafka_brokers", 1)
    if brokers > 1:
        if "bootstrap_servers" not in values:
            kp = values.get("kafka_port", _default_of("kafka_port"))
            cp = values.get("kafka_controller_port", _default_of("kafka_controller_port"))
            values["bootstrap_servers"] = ",".join(f"127.0.0.1:{k}" for k, _ in _broker_ports(kp, cp, brokers))
        values.setdefault("replication_factor", min(3, brokers))
    # A local-stack port given without its client address moves the address with it, so
    # TTS_KAFKA_PORT=19092 alone yields a second stack that clients actually reach.
    for port_name, addr_name, fmt in _PORT_ADDRESSES:
        if port_name in values and addr_name not in values:
            values[addr_name] = fmt.format(values[port_name])
    unknown = set(values) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
    return Settings(**values)


def settings_table() -> str:
    """The README's configuration table, one row per field; :func:`with_settings_table` puts it
    in place (``tests/unit/test_settings.py`` checks the README holds exactly this)."""
    def cell(text: str) -> str:  # a literal "<name>" would vanish as an HTML tag when rendered
        return text.replace("|", "\\|").replace("<", "\\<")

    home = _default_home()
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for env, default, doc in Settings.describe():
        shown = "~/.local/share/ttsflow" if default == home else default
        lines.append(f"| `{env}` | `{shown}` | {cell(doc)} |")
    return "\n".join(lines)


def with_settings_table(readme: str) -> str:
    """``readme`` with its configuration table (the one headed ``| variable | default | meaning |``)
    replaced by :func:`settings_table`. Regenerate with ``python -c "from pathlib import Path;
    from streams.settings import with_settings_table as w; p = Path('README.md');
    p.write_text(w(p.read_text()))"``."""
    lines = readme.split("\n")
    start = lines.index("| variable | default | meaning |")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], settings_table(), *lines[end:]])
