"""Fault injection for the stage's tests: make faust drop fetched records the way it does around a
rebalance (fetched, the partition's position moved past them, never handed to the agent).

Loaded into a stage subprocess as ``sitecustomize`` (the test puts a directory holding a
``sitecustomize.py`` that imports this on ``PYTHONPATH``); ``TTSFLOW_TEST_DROP`` =
``<partition>:<first offset>:<count>`` drops that many records of the requests topic's partition
from that offset on, once per process.
"""

from __future__ import annotations

import os
from typing import Any


def install() -> None:
    spec = os.environ.get("TTSFLOW_TEST_DROP")
    if not spec:
        return
    partition, first, count = (int(x) for x in spec.split(":"))
    import faust.transport.consumer as fc

    getmany = fc.Consumer.getmany
    left = [count]

    async def dropping(self: Any, timeout: float) -> Any:
        async for tp, message in getmany(self, timeout):
            if (left[0] > 0 and tp.partition == partition and message.offset >= first
                    and tp.topic.startswith(os.environ.get("TTSFLOW_TEST_DROP_TOPIC", "tts.requests"))):
                left[0] -= 1
                continue
            yield tp, message

    fc.Consumer.getmany = dropping  # type: ignore[method-assign]
