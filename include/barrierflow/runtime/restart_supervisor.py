"""The restart supervisor: ``barrierflow run`` of a spec with a ``restart:`` block.

The supervisor runs no pipeline itself. It starts the run as a child process (the same
``barrierflow run`` command, marked as an attempt of this supervisor), waits for it, and when
it fails asks the spec's restart strategy (:mod:`barrierflow.runtime.restart_strategy`)
whether and when to start it again. The restarted child is the same command, so it recovers
as every start after a failure does (restore at start, :mod:`barrierflow.runtime.pipeline_runner`):
one stage continues from its local Spark checkpoint or, without one, restores its newest valid
checkpoint; several stages restore the latest global checkpoint as a new attempt; the sinks
first finish what the failed attempt left in doubt. Exactly-once therefore holds across
restarts as across any crash and rerun. Contract, step by step:

1. The child runs in a process group of its own, with the kernel's parent-death signal set to
   SIGKILL (Linux ``PR_SET_PDEATHSIG``): if the supervisor dies, however it dies, the child
   dies with it (its Spark JVM dies with the child, stage processes of ``--processes`` stop
   when their parent is gone), and the next ``barrierflow run`` recovers like after any crash.
   SIGTERM or SIGINT to the supervisor is passed on to the child (SIGTERM), which stops as a
   plain run does, and the supervisor then exits 1 ("interrupted") without restarting.
2. The child's stderr passes through (every line, as it comes); the supervisor keeps its last
   lines for the failure message.
3. Exit 0: the run ended as asked; the supervisor returns what it did (restarts, delays).
   Exit 2 (bad input: the spec, arguments, a lease held by another process): not restarted,
   :class:`~barrierflow.errors.UserInputError` quoting the child's error.
4. Any other end (exit 1, killed by a signal) is a failure: the cause is the child's last
   ``error:`` line, else its signal or exit status. The supervisor SIGKILLs what is left of
   the child's process group and waits until none of it runs, then until the pipeline's lease
   is free (the dead child's lease on this host is free at once; ``lease_wait`` seconds at
   most), then asks the strategy: a delay restarts the child after it (one line on stderr:
   ``restart N of M after X s (strategy S): CAUSE``); None stops the supervisor with
   :class:`RestartsExhaustedError` naming the cause, the strategy and the delays it granted.
5. The caller's observers hear of both (the alerts of ``barrierflow run``,
   :mod:`barrierflow.ops.supervised_run`): ``on_restart(restart, strategy)`` once the delay is
   known, before the wait; ``on_give_up(message, run)`` before :class:`RestartsExhaustedError` is
   raised with that message. An observer that raises is logged and ignored: it cannot stop a
   restart or change how the supervisor ends. Its time counts against the delay (the wait is
   what is left of it), so a bounded observer does not slow restarts that wait at least as long.

The clock (``monotonic``) and the wait (``sleep``) are injectable; the strategy is pure.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from barrierflow.errors import JobFailedError, UserInputError
from barrierflow.runtime.restart_strategy import RestartStrategy

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec

log = logging.getLogger(__name__)

#: prctl(2) option: the signal the kernel sends a process when its parent (thread) exits.
_PR_SET_PDEATHSIG = 1
#: Seconds a child that was asked to stop (SIGTERM) gets before it is killed.
STOP_GRACE_SECONDS = 120.0
#: Seconds the rest of a dead child's process group gets to disappear after SIGKILL.
GROUP_GONE_TIMEOUT = 60.0
#: Seconds between two looks at the process group and the lease while waiting for them.
POLL_SECONDS = 0.1
#: Lines of the child's stderr kept for the failure message.
TAIL_LINES = 20
#: Set for each attempt by a supervisor of whole spark-submits (the Airflow launch's detached
#: launcher, :mod:`barrierflow.ops.detached_launch`): such an attempt runs as is
#: (:mod:`barrierflow.ops.supervised_run`).
RESTART_SUPERVISOR_ENV = "BARRIERFLOW_SUPERVISED_BY"


class RestartsExhaustedError(JobFailedError):
    """The job failed and its restart strategy allows no further restart; :attr:`run` is what
    the supervisor did until then (its restarts)."""

    run: SupervisedRun | None = None


@dataclass(frozen=True)
class Restart:
    """One restart: the failure that caused it and the delay waited before it."""

    number: int
    cause: str
    delay: float


@dataclass
class SupervisedRun:
    """What a supervised run did: the attempts started and the restarts between them."""

    strategy: str
    restarts: list[Restart] = field(default_factory=list)

    @property
    def attempts(self) -> int:
        return len(self.restarts) + 1


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when this process dies, or None
    where prctl is not available (the child then outlives a killed supervisor)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:  # no /proc: ask the kernel about the group as a whole
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_name(code: int) -> str:
    with suppress(ValueError):
        return signal.Signals(-code).name
    return f"signal {-code}"


class _Child:
    """One attempt: the child process and a thread passing its stderr through."""

    def __init__(self, command: Sequence[str], env: dict[str, str], stderr: IO[str]) -> None:
        self.process = subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, errors="replace", bufsize=1, start_new_session=True,
                                        preexec_fn=_die_with_parent())
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._relay = threading.Thread(target=self._pass_through, args=(stderr,), daemon=True,
                                       name=f"restart-supervisor-stderr-{self.process.pid}")
        self._relay.start()

    def _pass_through(self, stderr: IO[str]) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.tail.append(line.rstrip("\n"))
            with suppress(OSError, ValueError):
                stderr.write(line)
                stderr.flush()

    def wait(self) -> int:
        return self.process.wait()

    def finish(self) -> None:
        """After the child's end: the rest of its stderr passed through (what is left of its
        process group may hold the pipe open: at most a few seconds)."""
        self._relay.join(timeout=5.0)

    def cause(self, code: int) -> str:
        """Why the attempt ended (exit ``code``): its last ``error:`` line, else how it ended."""
        errors = [line.removeprefix("error: ") for line in self.tail if line.startswith("error: ")]
        how = (f"the run (pid {self.process.pid}) was killed by {_signal_name(code)}" if code < 0
               else f"the run (pid {self.process.pid}) exited {code}")
        return f"{errors[-1]} ({how})" if errors else how

    def stop(self) -> None:
        """Ask the child to stop (SIGTERM), and SIGKILL its group after :data:`STOP_GRACE_SECONDS`."""
        with suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("run (pid %d) did not stop within %g s of SIGTERM: killing it", self.process.pid,
                        STOP_GRACE_SECONDS)
        self.bury()

    def bury(self) -> None:
        """SIGKILL what is left of the child's process group; return once none of it runs."""
        pgid = self.process.pid
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        self.process.wait()
        deadline = time.monotonic() + GROUP_GONE_TIMEOUT
        while (left := _group_members(pgid)) and time.monotonic() < deadline:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            time.sleep(POLL_SECONDS)
        self.finish()
        if left:
            raise JobFailedError(f"processes {left} of the failed run (process group {pgid}) did not end within "
                                 f"{GROUP_GONE_TIMEOUT:g} s of SIGKILL; not restarting over them")


def supervise(command: Sequence[str], strategy: RestartStrategy, *, lease_free: Callable[[], bool],
              name: str, env: dict[str, str] | None = None, lease_wait: float = 60.0,
              monotonic: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
              stderr: IO[str] | None = None,
              command_for_attempt: Callable[[int, float], Sequence[str]] | None = None,
              on_restart: Callable[[Restart, RestartStrategy], None] | None = None,
              on_give_up: Callable[[str, SupervisedRun], None] | None = None) -> SupervisedRun:
    """Run ``command`` (``barrierflow run ...`` of pipeline ``name``) under ``strategy``; see the
    module docstring for the contract. ``lease_free``: whether the pipeline's lease may be
    taken; ``command_for_attempt(attempt, elapsed)``: the command of attempt 2, 3, ... given the
    seconds since the first started (the caller shortens ``--duration``); default ``command``;
    ``on_restart``, ``on_give_up``: observers (step 5).

    Raises:
        UserInputError: an attempt exited 2 (bad input); not restarted.
        RestartsExhaustedError: a failure the strategy does not restart.
        JobFailedError: the dead attempt's processes or the lease did not go away.
        KeyboardInterrupt: the supervisor was asked to stop; the child was stopped first.
    """
    out = stderr if stderr is not None else sys.stderr
    environment = dict(os.environ if env is None else env)
    run = SupervisedRun(strategy.describe())
    started = monotonic()
    attempt_command: Sequence[str] = command
    while True:
        child = _Child(attempt_command, environment, out)
        try:
            code = child.wait()
        except KeyboardInterrupt:
            child.stop()
            raise
        if code == 0:
            child.finish()
            return run
        failed_at = monotonic()
        child.bury()
        cause = child.cause(code)
        if code == 2:
            raise UserInputError(f"pipeline {name}: {cause}; not restarted (bad input does not heal by restarting)")
        log.warning("pipeline %s: attempt %d failed: %s", name, run.attempts, cause)
        _wait_for_lease(name, lease_free, lease_wait, sleep, monotonic)
        delay = strategy.next_delay(failed_at)
        if delay is None:
            message = _exhausted(name, cause, strategy, run)
            _observe(name, "on_give_up", on_give_up, message, run)
            exhausted = RestartsExhaustedError(message)
            exhausted.run = run
            raise exhausted
        restart = Restart(len(run.restarts) + 1, cause, delay)
        run.restarts.append(restart)
        with suppress(OSError, ValueError):
            out.write(f"restart {strategy.restarts} of {strategy.limit} after {delay:.1f} s (strategy "
                      f"{strategy.name}): {cause}\n")
            out.flush()
        spent = _observe(name, "on_restart", on_restart, restart, strategy, monotonic=monotonic)
        sleep(max(0.0, delay - spent) if spent else delay)
        attempt_command = (command_for_attempt(run.attempts, monotonic() - started)
                           if command_for_attempt is not None else command)


def _observe(name: str, what: str, observer: Callable[..., None] | None, *args: object,
             monotonic: Callable[[], float] = time.monotonic) -> float:
    """Call ``observer(*args)``; log what it raises and go on (step 5). Returns the seconds it
    took (0 without an observer)."""
    if observer is None:
        return 0.0
    started = monotonic()
    try:
        observer(*args)
    except Exception as exc:  # an observer must not change what the supervisor does
        log.warning("pipeline %s: the %s observer failed (%s: %s); the supervisor goes on", name, what,
                    type(exc).__name__, exc)
    return monotonic() - started


def _wait_for_lease(name: str, lease_free: Callable[[], bool], timeout: float, sleep: Callable[[float], None],
                    monotonic: Callable[[], float]) -> None:
    deadline = monotonic() + timeout
    while not lease_free():
        if monotonic() > deadline:
            raise JobFailedError(f"pipeline {name}: its lease was still held {timeout:g} s after the failed run "
                                 "ended (another process runs, restores or reconciles it); not restarting")
        sleep(POLL_SECONDS)


def _exhausted(name: str, cause: str, strategy: RestartStrategy, run: SupervisedRun) -> str:
    if run.restarts:
        delays = ", ".join(f"{r.delay:.1f} s" for r in run.restarts)
        did = f"it restarted the job {len(run.restarts)} time(s), after {delays}"
    else:
        did = "it allowed no restart"
    return (f"pipeline {name} stopped after {run.attempts} attempt(s): {cause}. Restart strategy {strategy.describe()}"
            f": {did}, and allows no further restart. Fix the cause and run it again (it continues from its "
            "latest checkpoint)")


def restart_alert_observers(spec: PipelineSpec) -> dict[str, Any]:
    """The supervisor's ``on_restart`` and ``on_give_up`` for the spec's ``alerts`` block (none: {})."""
    alerts = spec.alerts
    if alerts is None:
        return {}
    from barrierflow.alerts import AlertKind, send_alert

    host = socket.gethostname()

    def on_restart(restart: Restart, strategy: RestartStrategy) -> None:
        message = (f"pipeline {spec.name} failed and is restarted in {restart.delay:.1f} s (restart "
                   f"{strategy.restarts} of {strategy.limit}, strategy {strategy.describe()}): {restart.cause}")
        send_alert(spec.name, alerts, AlertKind.RESTART, message, details={
            "restart": strategy.restarts, "limit": strategy.limit, "delay_seconds": restart.delay,
            "strategy": strategy.describe(), "cause": restart.cause, "host": host})

    def on_give_up(message: str, run: SupervisedRun) -> None:
        send_alert(spec.name, alerts, AlertKind.GAVE_UP, message, details={
            "attempts": run.attempts, "delays_seconds": [r.delay for r in run.restarts], "strategy": run.strategy,
            "host": host})

    return {"on_restart": on_restart, "on_give_up": on_give_up}
