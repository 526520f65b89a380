"""Helpers of the fencing tests: a driver that suspends itself (SIGSTOP) at a crash point
(:func:`suspended_driver` starts it and waits until it stopped), the state of a process, and
waiting for a condition with a deadline (no fixed sleeps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from barrierflow.lease import TTL_ENV

from tests.drivers import short_lived_driver_env

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


@dataclass
class SuspendedDriver:
    """A driver process (``suspending_driver``) that has suspended itself."""

    process: subprocess.Popen[str]
    started: float
    _stderr: IO[str]

    def elapsed(self) -> float:
        """Seconds since the driver was started."""
        return time.monotonic() - self.started

    def resume(self, timeout: float) -> int:
        """SIGCONT the driver and wait for its exit code."""
        os.kill(self.process.pid, signal.SIGCONT)
        return self.process.wait(timeout=timeout)

    def stderr(self) -> str:
        """Everything the driver wrote to stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read()


@contextmanager
def suspended_driver(spec_path: Path, point: str, what: str, timeout: float) -> Iterator[SuspendedDriver]:
    """Start ``python -c suspending_driver(point, what) SPEC`` (short-lived-driver JVM options, lease
    TTL 2 s) and yield it once it stopped itself; fail if it ended instead or took longer than
    ``timeout`` s. On exit a driver still alive is resumed and killed."""
    env = {**os.environ, **short_lived_driver_env(), TTL_ENV: "2"}
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen([sys.executable, "-c", suspending_driver(point, what), str(spec_path)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=err, text=True)
        driver = SuspendedDriver(process, time.monotonic(), err)
        try:
            wait_until(lambda: process.poll() is not None or process_state(process.pid) == "T",
                       "the old driver to suspend itself", timeout)
            assert process.poll() is None, f"the old driver ended instead of suspending itself:\n{driver.stderr()}"
            print(f"old driver suspended after {driver.elapsed():.1f} s")
            yield driver
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait()
