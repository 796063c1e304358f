"""Where a local stack keeps everything: one ``TTS_HOME`` per stack instance, and the
templates and Maven file under ``deploy/local`` it is built from. Paths only; nothing here
creates a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streams.settings import Settings

__all__ = ["DEPLOY_DIR", "StackPaths", "stack_paths"]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy" / "local"


@dataclass(frozen=True, slots=True)
class StackPaths:
    """Where one stack instance (one ``TTS_HOME``) keeps everything."""

    home: Path

    @property
    def jars(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_jars(self) -> Path:
        return self.jars / "kafka"

    @property
    def s3proxy_dir(self) -> Path:
        return self.jars / "s3proxy"

    @property
    def conf(self) -> Path:
        return self.home / "conf"

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"


def stack_paths(settings: Settings) -> StackPaths:
    return StackPaths(Path(settings.process.home).expanduser().resolve())
