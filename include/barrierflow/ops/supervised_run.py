"""``barrierflow run`` of a spec with a ``restart:`` block: the run under its restart strategy.

:func:`run_supervised` is what the CLI calls before running a pipeline itself: for a spec
without ``restart:`` it returns None (the caller runs the pipeline in its own process, as
always: a failure ends the run). With one, this process becomes the restart supervisor
(:mod:`barrierflow.runtime.restart_supervisor`): every attempt is ``barrierflow run SPEC
--attempt-of-supervisor PID`` with the caller's options, in a child process, restarted after a
failure as the strategy allows (:mod:`barrierflow.runtime.restart_strategy`).

The options across attempts: ``--duration`` bounds the supervised run as a whole (each
restarted attempt gets what is left of it); ``--checkpoints N`` is counted per attempt (a
restarted attempt runs until N more cuts completed); ``--until-exhausted`` ends the attempt
that saw the bounded sources covered.

With an ``alerts`` block in the spec, the supervisor's observers send a ``restart`` alert before
each restart (the cause, the delay, restart N of M) and a ``gave_up`` alert when the strategy
allows no more (the message of :class:`RestartsExhaustedError`), each within ``alerts.timeout``
(:mod:`barrierflow.alerts`); an alert that cannot be sent is logged and changes nothing else.

Under spark-submit (``jobs/run_pipeline.py``) this process cannot be the supervisor: an
attempt in a child process would share spark-submit's JVM, which holds one SparkContext, and
would not know its ``--master``. The Airflow launch therefore applies the strategy (and its
alerts) one level up: its detached launcher (:mod:`barrierflow.ops.detached_launch`) supervises
whole spark-submits and marks them with ``BARRIERFLOW_SUPERVISED_BY``; such an attempt runs as
is. A spark-submit that no launcher started logs a warning that the strategy is not applied.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from barrierflow.lease import default_ttl, job_running
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.restart_strategy import strategy_for
from barrierflow.runtime.restart_supervisor import (
    RESTART_SUPERVISOR_ENV,
    Restart,
    RestartsExhaustedError,
    restart_alert_observers,
    supervise,
)
from barrierflow.spec.loader import load_any_spec

log = logging.getLogger(__name__)

__all__ = ["ATTEMPT_FLAG", "Restart", "RestartsExhaustedError", "SupervisedOutcome", "restart_alert_observers",
           "run_supervised"]

#: The flag that marks a run as one attempt of a supervisor (value: the supervisor's pid).
ATTEMPT_FLAG = "--attempt-of-supervisor"
#: Set by spark-submit for the Python driver it starts (the py4j gateway of its JVM).
SPARK_SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"


@dataclass(frozen=True)
class SupervisedOutcome:
    """A supervised run that ended as asked (its last attempt exited 0)."""

    pipeline: str
    strategy: str
    restarts: tuple[Restart, ...]

    @property
    def attempts(self) -> int:
        return len(self.restarts) + 1

    def summary(self) -> str:
        """One line for the operator: attempts, restarts and their delays."""
        if not self.restarts:
            return f"pipeline {self.pipeline}: no restart needed ({self.strategy})"
        delays = ", ".join(f"{r.delay:.1f} s" for r in self.restarts)
        return (f"pipeline {self.pipeline}: finished after {len(self.restarts)} restart(s) (delays {delays}; "
                f"{self.strategy})")


def _command(spec_path: str, *, duration: float | None, checkpoints: int | None, until_exhausted: bool,
             quiet: bool, processes: bool, verbose: bool) -> list[str]:
    command = [sys.executable, "-m", "barrierflow.cli.main", *(["--verbose"] if verbose else []), "run", spec_path,
               ATTEMPT_FLAG, str(os.getpid())]
    if duration is not None:
        command += ["--duration", f"{duration:.3f}"]
    if checkpoints is not None:
        command += ["--checkpoints", str(checkpoints)]
    command += [flag for flag, on in (("--until-exhausted", until_exhausted), ("--quiet", quiet),
                                      ("--processes", processes)) if on]
    return command


def run_supervised(spec_path: str | os.PathLike[str], *, duration: float | None = None,
                   checkpoints: int | None = None, until_exhausted: bool = False, quiet: bool = False,
                   processes: bool = False, verbose: bool = False) -> SupervisedOutcome | None:
    """Run the pipeline under its spec's restart strategy, or return None when the spec has none.

    Raises:
        SpecError: the spec does not load.
        UserInputError: an attempt exited 2 (its error quoted); not restarted.
        RestartsExhaustedError: the job failed and the strategy allows no further restart (the
            message names the last failure, the strategy and the delays it granted).
        JobFailedError: a failed attempt's processes or the pipeline's lease did not go away.
    """
    spec = load_any_spec(spec_path)
    if spec.restart is None:
        return None
    if os.environ.get(RESTART_SUPERVISOR_ENV):
        log.info("pipeline %s: an attempt of the launcher pid %s, which applies the restart strategy", spec.name,
                 os.environ[RESTART_SUPERVISOR_ENV])
        return None
    if SPARK_SUBMIT_ENV in os.environ:
        # A child would share spark-submit's JVM (one SparkContext per JVM) and lose its --master.
        log.warning("pipeline %s: its restart strategy is not applied under a spark-submit of your own (the Airflow "
                    "launch applies it around spark-submit; otherwise the recovery DAG barrierflow_recover__%s "
                    "restarts it). 'barrierflow run %s' runs it under its restart strategy", spec.name, spec.name,
                    spec_path)
        return None
    pipeline = open_pipeline(spec_path)
    work_dir, objects = Path(pipeline.work_dir), pipeline.objects
    path = str(spec_path)
    options = {"checkpoints": checkpoints, "until_exhausted": until_exhausted, "quiet": quiet,
               "processes": processes, "verbose": verbose}

    def later_attempt(attempt: int, elapsed: float) -> list[str]:
        left = None if duration is None else max(duration - elapsed, 0.001)
        return _command(path, duration=left, **options)  # type: ignore[arg-type]

    run = supervise(_command(path, duration=duration, **options),  # type: ignore[arg-type]
                    strategy_for(spec.restart), name=spec.name, lease_free=lambda: not job_running(work_dir, objects),
                    lease_wait=2 * default_ttl(), command_for_attempt=later_attempt, **restart_alert_observers(spec))
    return SupervisedOutcome(spec.name, run.strategy, tuple(run.restarts))
