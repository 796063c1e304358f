"""The local stack's port picks: outside the kernel's ephemeral range (where every outgoing
connection takes its source port, so a picked port could be gone by the server's bind), free
when picked, and never overlapping."""

from __future__ import annotations

import socket

from streams.devstack.procs import _ephemeral_range, free_port, free_ports


def test_a_broker_block_is_free_below_the_ephemeral_range_and_clear_of_what_it_must_avoid() -> None:
    offsets = [10 * i + d for i in range(3) for d in (0, 1)]
    lo, _ = _ephemeral_range()
    for _ in range(20):
        (kp,) = free_ports(1, offsets=offsets)
        block = {kp + o for o in offsets}
        others = free_ports(2, avoid=block)
        assert max(block) < lo and all(p < lo for p in others)
        assert len(set(others)) == 2 and block.isdisjoint(others)
        for p in [*block, *others]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))  # raises if the pick was not free


def test_a_port_in_use_is_never_picked() -> None:
    lo, _ = _ephemeral_range()
    held = []
    try:
        for _ in range(30):
            p = free_port()
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            s.listen()
            held.append(s)
        ports = [s.getsockname()[1] for s in held]
        assert len(set(ports)) == len(ports) and max(ports) < lo
    finally:
        for s in held:
            s.close()
