"""Helpers of the fencing tests: a driver that suspends itself (SIGSTOP) at a crash point, the
state of a process, and waiting for a condition with a deadline (no fixed sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

_SUSPENDING_DRIVER = """
import os, signal, sys
from barrierflow.faults import at_point
from barrierflow.cli.main import main

hits = []

def suspend(context):
    hits.append(context)
    if len(hits) == 2:
        sys.stderr.write(f"suspending after WHAT {context['checkpoint_id']}\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)

with at_point(POINT, suspend):
    sys.exit(main(["run", sys.argv[1], "--until-exhausted", "--quiet"]))
"""


def suspending_driver(point: str, what: str) -> str:
    """Source of a driver (``python -c SOURCE SPEC``) that runs SPEC to the end but suspends
    itself the 2nd time crash point ``point`` is reached (``what``: how the log names it)."""
    return _SUSPENDING_DRIVER.replace("WHAT", what).replace("POINT", repr(point))


def process_state(pid: int) -> str:
    """The process state letter from /proc (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_until(condition: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``condition`` every 50 ms; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)
