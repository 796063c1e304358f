"""The local development stack: Kafka, S3 (s3proxy) and Redis without Docker (``ttsflow stack``),
and the supervisor that runs stages and workers as child processes for tests, the demo and
the benchmarks. Never imported by the product rooms (stage, worker, kafka, client)."""

__all__: list[str] = []
