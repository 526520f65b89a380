"""barrierflow.local_ports hands out ports outside the kernel's ephemeral range, never twice in
a process, and never one something is bound to."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from barrierflow import local_ports
from barrierflow.local_ports import chosen_range, ephemeral_range, free_port

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's ephemeral range")


@linux_only
def test_ports_lie_below_the_ephemeral_range_where_no_bind_0_or_outgoing_connection_lands() -> None:
    ephemeral = ephemeral_range()
    assert ephemeral is not None
    picked = [free_port() for _ in range(50)]
    assert all(local_ports.LOWEST_PORT <= p < ephemeral[0] for p in picked), picked
    # what a kernel-chosen port is: inside the range, so never one of ours
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert ephemeral[0] <= sock.getsockname()[1] <= ephemeral[1]


def test_no_port_is_handed_out_twice_in_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_ports, "_handed_out", set())
    pool = range(20000, 20400)  # below Linux's default ephemeral range: no socket of the kernel's choosing there
    picked = [free_port(candidates=pool) for _ in range(100)]
    assert all(p in pool for p in picked), "a pick fell back to the kernel's choice"
    assert len(set(picked)) == len(picked)


def test_a_port_something_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_ports, "_handed_out", set())
    with socket.socket() as taken, socket.socket() as probe:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        idle = probe.getsockname()[1]
        probe.close()  # bound a moment ago, free now
        pool = [busy, idle]
        assert free_port(candidates=pool) == idle
        # both tried now: the next pick is the kernel's, outside the pool
        assert free_port(candidates=pool) not in pool


def test_without_the_range_file_the_kernel_picks(tmp_path: Path) -> None:
    assert chosen_range(str(tmp_path / "absent")) is None
    cramped = tmp_path / "range"
    cramped.write_text(f"{local_ports.LOWEST_PORT + 10}\t60999\n")
    assert chosen_range(str(cramped)) is None  # no room below the range
    roomy = tmp_path / "roomy"
    roomy.write_text("32768\t60999\n")
    assert chosen_range(str(roomy)) == range(local_ports.LOWEST_PORT, 32768)
