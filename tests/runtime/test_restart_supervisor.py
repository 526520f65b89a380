"""The restart supervisor around small stand-in runs (Python one-liners, no Spark): what it
restarts, what it does not, what it waits for, and what it says. The delays are recorded by an
injected ``sleep``, never waited."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from barrierflow.errors import UserInputError
from barrierflow.processes import process_alive
from barrierflow.runtime.restart_strategy import ExponentialDelay, FailureRate, FixedDelay
from barrierflow.runtime.restart_supervisor import RestartsExhaustedError, supervise

#: A stand-in run: attempt k (counted in a file) behaves as ``plan[k]``: "kill" SIGKILLs itself,
#: "fail" prints an error line and exits 1, "bad" exits 2, "orphan" starts a grandchild in its
#: process group (pid in a file) and SIGKILLs itself, "ok" exits 0.
SCRIPT = """
import os, signal, subprocess, sys, time
from pathlib import Path
counter, plan = Path(sys.argv[1]), sys.argv[2].split(",")
attempt = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(attempt + 1))
what = plan[min(attempt, len(plan) - 1)]
print(f"attempt {attempt} doing {what}", file=sys.stderr, flush=True)
if what == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if what == "fail":
    print(f"error: sink out of disk space (attempt {attempt})", file=sys.stderr, flush=True)
    sys.exit(1)
if what == "bad":
    print("error: spec.yaml: checkpoint.interval: must be greater than 0 seconds", file=sys.stderr, flush=True)
    sys.exit(2)
if what == "orphan":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(sys.argv[1] + ".orphan").write_text(str(child.pid))
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _run(tmp_path: Path, plan: str, strategy: object, *, lease_free: object = None
         ) -> tuple[object, list[float], str]:
    slept: list[float] = []
    err = io.StringIO()
    command = [sys.executable, "-c", SCRIPT, str(tmp_path / "attempts"), plan]
    try:
        run = supervise(command, strategy, lease_free=lease_free or (lambda: True), name="p",  # type: ignore[arg-type]
                        sleep=slept.append, stderr=err)
    except Exception as exc:  # returned for the test to inspect
        return exc, slept, err.getvalue()
    return run, slept, err.getvalue()


def _attempts(tmp_path: Path) -> int:
    return int((tmp_path / "attempts").read_text())


def test_a_run_that_succeeds_is_not_restarted(tmp_path: Path) -> None:
    run, slept, err = _run(tmp_path, "ok", FixedDelay(3, 1.0))
    assert not isinstance(run, Exception) and run.attempts == 1 and run.restarts == []  # type: ignore[attr-defined]
    assert slept == [] and "attempt 0 doing ok" in err and _attempts(tmp_path) == 1


def test_killed_runs_are_restarted_after_the_strategys_delays(tmp_path: Path) -> None:
    strategy = ExponentialDelay(initial_backoff=0.5, max_backoff=10.0, backoff_multiplier=2.0, jitter_factor=0.0,
                                reset_backoff_threshold=3600.0)
    run, slept, err = _run(tmp_path, "kill,kill,ok", strategy)
    assert not isinstance(run, Exception), run
    assert [r.delay for r in run.restarts] == [0.5, 1.0] and slept == [0.5, 1.0]  # type: ignore[attr-defined]
    assert _attempts(tmp_path) == 3
    assert "restart 1 of unlimited after 0.5 s (strategy exponential-delay): the run (pid " in err
    assert "was killed by SIGKILL" in err
    assert "restart 2 of unlimited after 1.0 s (strategy exponential-delay)" in err


def test_past_the_limit_the_job_stops_naming_the_last_failure_and_what_was_done(tmp_path: Path) -> None:
    exc, slept, err = _run(tmp_path, "fail", FixedDelay(2, 3.0))
    assert isinstance(exc, RestartsExhaustedError)
    message = str(exc)
    assert "sink out of disk space (attempt 2)" in message and "exited 1" in message
    assert "fixed-delay: 2 attempts, 3 s apart" in message
    assert "restarted the job 2 time(s), after 3.0 s, 3.0 s" in message
    assert "stopped after 3 attempt(s)" in message
    assert slept == [3.0, 3.0] and _attempts(tmp_path) == 3
    assert "restart 2 of 2 after 3.0 s (strategy fixed-delay): sink out of disk space (attempt 1)" in err


def test_failure_rate_of_one_stops_at_the_second_failure(tmp_path: Path) -> None:
    exc, _, _ = _run(tmp_path, "kill", FailureRate(max_failures_per_interval=1, failure_rate_interval=600.0,
                                                   delay=0.0))
    assert isinstance(exc, RestartsExhaustedError) and "killed by SIGKILL" in str(exc)
    assert "failure-rate: at most 1 failures per 600 s" in str(exc) and _attempts(tmp_path) == 2


def test_bad_input_is_not_restarted(tmp_path: Path) -> None:
    exc, slept, _ = _run(tmp_path, "bad", FixedDelay(5, 1.0))
    assert isinstance(exc, UserInputError) and not isinstance(exc, RestartsExhaustedError)
    assert "checkpoint.interval: must be greater than 0 seconds" in str(exc) and "not restarted" in str(exc)
    assert slept == [] and _attempts(tmp_path) == 1


def test_what_is_left_of_a_dead_run_is_gone_before_the_restart(tmp_path: Path) -> None:
    seen: list[bool] = []

    def lease_free() -> bool:  # asked once the dead run's process group is gone
        orphan = tmp_path / "attempts.orphan"
        seen.append(process_alive(int(orphan.read_text())) if orphan.exists() else False)
        return True

    run, _, _ = _run(tmp_path, "orphan,ok", FixedDelay(1, 0.0), lease_free=lease_free)
    assert not isinstance(run, Exception), run
    assert seen == [False], "the dead run's grandchild still ran when the restart was prepared"


def test_the_restart_waits_for_the_lease(tmp_path: Path) -> None:
    answers = iter([False, False, True])
    run, slept, _ = _run(tmp_path, "kill,ok", FixedDelay(1, 2.0), lease_free=lambda: next(answers))
    assert not isinstance(run, Exception), run
    assert slept[-1] == 2.0 and len(slept) == 3, "two waits for the lease, then the strategy's delay"


def test_a_lease_that_stays_held_stops_the_supervisor(tmp_path: Path) -> None:
    clock = iter(range(0, 10_000, 10))

    slept: list[float] = []
    with pytest.raises(Exception, match="lease was still held 5 s after the failed run"):
        supervise([sys.executable, "-c", SCRIPT, str(tmp_path / "attempts"), "kill"], FixedDelay(3, 0.0),
                  lease_free=lambda: False, name="p", lease_wait=5.0, sleep=slept.append,
                  monotonic=lambda: float(next(clock)), stderr=io.StringIO())


def test_the_child_dies_with_its_supervisor(tmp_path: Path) -> None:
    """A supervisor killed by SIGKILL takes its run with it (the kernel's parent-death signal)."""
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "pid"
    run = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    driver = (f"import sys; sys.path[:0] = {sys.path!r}\n"
              "from barrierflow.runtime.restart_supervisor import supervise\n"
              "from barrierflow.runtime.restart_strategy import FixedDelay\n"
              f"supervise([sys.executable, '-c', {run!r}], FixedDelay(1, 0.0), lease_free=lambda: True, name='p')\n")
    supervisor = subprocess.Popen([sys.executable, "-c", driver])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and supervisor.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert process_alive(child)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait()
    deadline = time.monotonic() + 30
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child), "the run outlived its killed supervisor"
