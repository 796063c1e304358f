"""The reload gate: when a pending hot reload (SIGHUP) may swap the model, and which model made which part.

Invariants:

* SIGHUP only sets a flag (:mod:`engine.reload`); the swap happens here, at the top of a
  loop turn when nothing is in flight (no batched, synthesizing, joining or unfinished
  request), so every part of a request is made by one model and keyed with its identity.
* If the work never drains within ``max_wait_s``, the loop first finishes what is batched
  and in flight with the old model (``settle``), then the swap happens: a request whose
  parts span the swap is joined from memory or by the keys its parts were stored under
  (:attr:`old_identities`), and its completion names the new model.
* A refused candidate leaves the old model serving. An :class:`engine.engine.Engine` (no
  model store: ChatTTS) never reloads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from engine.engine import Engine
from schemas import ModelInfo

if TYPE_CHECKING:
    from engine.reload import ModelManager

__all__ = ["ReloadGate"]

_log = logging.getLogger("ttsflow.worker")


class ReloadGate:
    """The serving model's identity, and the one place it changes."""

    def __init__(self, engine: Engine | ModelManager, metrics: Any, *, clock: Callable[[], float],
                 max_wait_s: float) -> None:
        self.engine = engine
        self.metrics = metrics
        self.clock = clock
        self.max_wait_s = max_wait_s
        self.identity = ""
        self.model_info: ModelInfo
        self.old_identities: list[str] = []  # identities served before a hot reload, newest first
        self._since: float | None = None
        self._set_identity()

    def _set_identity(self) -> None:
        """Cache the serving model's identity (part keys, request keys, completions' model info)."""
        info = self.engine.info
        identity = f"{info.name}:{info.version}:{info.precision}"
        if self.identity and identity != self.identity:
            self.old_identities = [self.identity, *[i for i in self.old_identities if i != identity][:7]]
        self.identity = identity
        self.model_info = ModelInfo(name=info.name, version=info.version, precision=info.precision,
                                    provider=info.provider)

    def model_info_for(self, voice: str | None) -> ModelInfo:
        """The model a completion names for a request spoken by ``voice``: the backend that speaks it
        when the engine serves several (engine.router.BackendRouter), else the serving model."""
        info_for = getattr(self.engine, "info_for", None)
        if info_for is None or voice is None:
            return self.model_info
        info = info_for(voice)
        return ModelInfo(name=info.name, version=info.version, precision=info.precision, provider=info.provider)

    @property
    def pending(self) -> bool:
        """A reload was asked for (SIGHUP) and not applied yet."""
        return not isinstance(self.engine, Engine) and bool(getattr(self.engine, "reload_pending", False))

    def due(self, *, idle: bool) -> Literal["no", "swap", "settle_first"]:
        """Whether a reload asked for by SIGHUP may swap now (module docstring): ``swap`` when nothing is
        in flight, ``settle_first`` once the work in flight has not drained within ``max_wait_s`` (the
        loop finishes it with the serving model, then swaps), else ``no``."""
        if not self.pending:
            self._since = None
            return "no"
        now = self.clock()
        if self._since is None:
            self._since = now
            _log.info("event=model_reload_pending model=%s waiting_for_drain=%s", self.identity, not idle)
        if idle:
            return "swap"
        if now - self._since < self.max_wait_s:
            return "no"
        _log.warning("event=model_reload_forced model=%s waited_s=%.1f", self.identity, now - self._since)
        return "settle_first"

    def swap(self) -> None:
        """Load the candidate model and serve it, unless the manager refuses it (old model kept)."""
        self._since = None
        manager = self.engine
        assert not isinstance(manager, Engine)
        result = manager.maybe_reload()
        if result is None:
            return
        self.metrics.model_reload(result.swapped)
        if result.swapped:
            old = self.identity
            self._set_identity()
            _log.info("event=worker_model_reloaded old=%s new=%s load_s=%.3f cold_start_s=%.3f", old, self.identity,
                      result.load_s, result.cold_start_s)
        else:
            _log.warning("event=worker_model_reload_refused serving=%s candidate=%s reason=%r", result.serving,
                         result.candidate, result.reason)
