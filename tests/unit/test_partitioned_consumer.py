"""The worker's consumer after librdkafka declares it failed: replaced, its partitions lost, a limit."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from streams.errors import FatalError
from streams.kafka.consumer import PartitionedConsumer


class FakeConsumer:
    def __init__(self) -> None:
        self.subscribed: list[tuple[list[str], dict[str, Any]]] = []
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed.append((topics, callbacks))

    def close(self) -> None:
        self.closed = True


def fatal_poll_error() -> KafkaError:
    # what poll delivered on CI after a broker restart: code _FATAL, fatal() False on this object
    return KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other consumer "
                                         "with same group.instance.id")


def test_a_fenced_consumer_is_replaced_and_its_partitions_are_lost_not_kept() -> None:
    """CI: after a broker restart the worker's static member was fenced for good; it logged the
    error and polled the dead consumer for four minutes, answering nothing."""
    made: list[FakeConsumer] = []

    def factory() -> FakeConsumer:
        made.append(FakeConsumer())
        return made[-1]

    first = FakeConsumer()
    c = PartitionedConsumer(first, "tts.segments", factory=factory)
    lost: list[list[int]] = []
    c.subscribe(on_assign=lambda *_: None, on_revoke=lambda *_: None,
                on_lost=lambda _c, tps: lost.append([tp.partition for tp in tps]))
    c.assign({0, 1})
    c.rewind_pending.add(1)
    assert not fatal_poll_error().fatal()
    c.note_error(fatal_poll_error(), now=10.0)
    assert lost == [[0, 1]]                       # the loop drops their work; redone from committed offsets
    assert len(made) == 1 and c._c is made[0]
    assert made[0].subscribed and made[0].subscribed[0][0] == ["tts.segments"]
    assert set(made[0].subscribed[0][1]) == {"on_assign", "on_revoke", "on_lost"}
    assert c.assigned == set() and c.rewind_pending == set()
    assert c.abandoned == [first]


def test_replacements_are_limited_then_the_error_is_fatal() -> None:
    c = PartitionedConsumer(FakeConsumer(), "t", factory=FakeConsumer)
    c.subscribe(on_assign=lambda *_: None, on_revoke=lambda *_: None, on_lost=lambda *_: None)
    for k in range(3):
        c.note_error(fatal_poll_error(), now=float(k))
    with pytest.raises(FatalError, match="Static consumer fenced"):
        c.note_error(fatal_poll_error(), now=3.0)
    c.note_error(fatal_poll_error(), now=400.0)   # the window has passed: replaced again
    assert len(c.abandoned) == 4


def test_lost_partitions_not_given_back_make_one_new_consumer_and_no_more() -> None:
    """CI: after a broker restart librdkafka reported the worker's partitions lost and then polled
    on for 3.5 minutes with nothing assigned and nothing reported."""
    c = PartitionedConsumer(FakeConsumer(), "t", factory=FakeConsumer)
    c.subscribe(on_assign=lambda *_: None, on_revoke=lambda *_: None, on_lost=lambda *_: None)
    lost_cb = c._c.subscribed[0][1]["on_lost"]
    c.assign({0, 1})
    c.rejoin_if_stranded(0.0)                     # nothing lost: nothing to do
    lost_cb(c._c, [])
    c.revoke({0, 1})                              # what the loop's on_lost does
    c.rejoin_if_stranded(1.0)
    c.rejoin_if_stranded(45.0)                    # 44 s stranded: still waiting
    assert c.abandoned == []
    c.rejoin_if_stranded(46.5)                    # 45.5 s: join again under a new consumer
    assert len(c.abandoned) == 1 and c._c.subscribed  # subscribed with the same callbacks
    for t in (100.0, 500.0, 5000.0):              # given nothing (more workers than partitions): left alone
        c.rejoin_if_stranded(t)
    assert len(c.abandoned) == 1
    c.assign({1})
    c._c.subscribed[0][1]["on_lost"](c._c, [])    # a later loss that is given back in time
    c.revoke({1})
    c.rejoin_if_stranded(6000.0)
    c.assign({1})
    c.rejoin_if_stranded(6100.0)
    assert len(c.abandoned) == 1
    for k in range(3):                            # and these replacements never count toward the fatal limit
        c.note_error(fatal_poll_error(), now=7000.0 + k)
    assert len(c.abandoned) == 4


def test_without_a_factory_a_fatal_error_stops_the_process() -> None:
    c = PartitionedConsumer(FakeConsumer(), "t")
    with pytest.raises(FatalError):
        c.note_error(fatal_poll_error(), now=0.0)
    c.note_error(KafkaError(KafkaError._TRANSPORT, "broker down"), now=0.0)  # informational: logged


class PausingConsumer(FakeConsumer):
    def __init__(self) -> None:
        super().__init__()
        self.paused: set[int] = set()

    def pause(self, tps: list[Any]) -> None:
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[Any]) -> None:
        self.paused -= {tp.partition for tp in tps}


def test_the_read_ahead_is_bounded_by_bytes_and_pauses_only_the_partitions_holding_their_share() -> None:
    """Issue 26 item 4: a long request's ~850 KiB of segment records (and the requests behind it in its
    partition) are read at once under the 2 MiB budget; past it only the partitions holding their
    share are paused, so the others keep being read."""
    raw = PausingConsumer()
    c = PartitionedConsumer(raw, "tts.segments")
    c.assign({0, 1, 2, 3})
    budget = 2048 * 1024
    c.apply_backpressure({0: 850 * 1024, 1: 4000}, budget)
    assert c.paused == set() and raw.paused == set()  # a whole request at the text limit fits
    c.apply_backpressure({0: 1900 * 1024, 1: 200 * 1024}, budget)
    assert c.paused == {0} and raw.paused == {0}      # past the budget: only the one holding its share
    c.apply_backpressure({0: 100 * 1024}, budget)
    assert c.paused == set() and raw.paused == set()  # drained: read again
