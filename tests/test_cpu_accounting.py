"""The suite's per-test CPU accounting (tests/support/cpu_accounting.py) counts a test's child
processes: a live child's CPU, and a reaped child's through ``os.times``."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cpu_accounting import TICKS, tree_cpu_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_a_live_child_and_a_reaped_child_are_counted() -> None:
    own, live = tree_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c", BURN + "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        for _ in range(200):  # until the child has burnt its CPU (its ticks reach 0.3 s)
            _, during = tree_cpu_seconds()
            if during.get(child.pid, 0) >= 0.25 * TICKS:
                break
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        assert during.get(child.pid, 0) > 0 and child.pid not in live
    finally:
        child.communicate(b"")
    subprocess.run([sys.executable, "-c", BURN], check=True)
    after, _ = tree_cpu_seconds()
    assert after - own >= 0.5  # the two children's 0.3 s each, reaped
