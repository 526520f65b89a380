"""Core-seconds per test, for finding what makes the suite long (``BARRIERFLOW_TEST_CPU=FILE``).

With the variable set, each test process appends one JSON line per test to ``FILE``: its node
id, wall seconds and core-seconds of the test process's tree over the test: its own and its
reaped children's CPU (``os.times``) plus the growth of every live descendant's (``/proc``),
so a test's drivers, brokers and Airflow processes count, and so does the worker's SparkSession
for the queries the test ran in it. Off (nothing is read) without the variable.

What it misses: a process whose parent died before it (a SIGKILLed driver's JVM in the crash
tests, a lost launcher's tree in the host-loss test) is re-parented to init, which reaps it, so
the CPU it used after its last look here is not counted; for such tests the figure is a lower
bound. The machine's total over the run (``/proc/stat``, a cpuacct cgroup) is the upper one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from bench.proc_stat import descendant_ticks

__all__ = ["ENV", "TICKS", "tree_cpu_seconds"]

ENV = "BARRIERFLOW_TEST_CPU"
#: clock ticks per second of /proc's CPU times
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> tuple[float, dict[int, int]]:
    """This process's CPU with its reaped children's (s), and its live descendants' ticks."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system, descendant_ticks(os.getpid())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    target = os.environ.get(ENV)
    if not target:
        yield
        return
    started, (own, live) = time.monotonic(), tree_cpu_seconds()
    yield
    own_after, live_after = tree_cpu_seconds()
    grown = sum(ticks - live.get(pid, 0) for pid, ticks in live_after.items())
    record = {"test": item.nodeid, "wall": round(time.monotonic() - started, 2),
              "cpu": round(own_after - own + grown / TICKS, 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
