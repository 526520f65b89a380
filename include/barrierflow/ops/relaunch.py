"""After a lost launch host: may the pipeline be launched again, and after how long?

The Airflow launch task asks this when its watch (:mod:`barrierflow.ops.pipeline_watch`)
reported the launch ``lost``: the launcher is gone without an exit record (its host or container
was lost) and the pipeline's lease is no longer live. :func:`decide_relaunch`

1. reads the lost launch's record (from the work dir, which every worker must see: a record
   that cannot be read fails with :class:`RelaunchImpossibleError` naming ``work_dir``);
2. refuses while the lease is live again (:class:`~barrierflow.lease.JobAlreadyRunningError`:
   fencing, the old driver may still run on a partitioned host; the caller waits again);
3. counts the loss against the spec's ``restart:`` strategy in the launch chain's restart ledger
   (:mod:`barrierflow.runtime.restart_ledger`: the budget the launcher's own restarts count
   against too; deciding the same lost launch twice counts it once);
4. sends the spec's ``restart`` alert with the delay, or, past the budget, its ``gave_up`` alert
   and returns a decision whose ``delay`` is None and whose ``message`` names the strategy and
   every cause.

Restoring the latest valid checkpoint and starting the new launcher are the caller's (the
restore and detached-launch operations).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from barrierflow.errors import UserInputError
from barrierflow.lease import JobAlreadyRunningError, describe, lease_state
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.restart_ledger import RestartLedger
from barrierflow.runtime.restart_supervisor import Restart, SupervisedRun, restart_alert_observers
from barrierflow.spec.loader import load_any_spec
from barrierflow.workdir.launches import LaunchRecord

log = logging.getLogger(__name__)

__all__ = ["RelaunchDecision", "RelaunchImpossibleError", "decide_relaunch", "read_lost_launch"]


class RelaunchImpossibleError(UserInputError):
    """The lost launch cannot be relaunched from here (its record is unreadable, or the spec has
    no ``restart:`` block); the message names the setting to fix."""


@dataclass(frozen=True)
class RelaunchDecision:
    """``delay`` seconds before the relaunch (None: the budget is spent), ``number`` the
    relaunch's place in the strategy ("N of M"), and one line for the task log."""

    record: LaunchRecord
    delay: float | None
    number: int
    limit: str
    strategy: str
    message: str


def _observe(name: str, observer: Callable[..., None] | None, *args: object) -> None:
    """Send an alert; one that cannot be sent is logged and changes nothing."""
    if observer is None:
        return
    try:
        observer(*args)
    except Exception as exc:  # an alert must not change the relaunch
        log.warning("pipeline %s: the alert failed (%s: %s); going on", name, type(exc).__name__, exc)


def read_lost_launch(record_path: str | os.PathLike[str]) -> LaunchRecord:
    """The lost launch's record. Raises :class:`RelaunchImpossibleError` when this host cannot
    read it: the work dir is not on a volume this worker mounts at the same path."""
    try:
        return LaunchRecord.read(record_path)
    except (OSError, ValueError, TypeError) as exc:
        raise RelaunchImpossibleError(
            f"cannot relaunch: the lost launch's record {record_path} cannot be read on this host ({exc}). A "
            "relaunch on another worker needs the pipeline's work_dir (launch records, exit records, the restart "
            "ledger, the lease mirror, the embedded broker's data) on a volume every Airflow worker and the "
            "triggerer mount at the same path; set the spec's work_dir to such a path") from exc


def decide_relaunch(record_path: str | os.PathLike[str], cause: str, *,
                    now: datetime | None = None) -> RelaunchDecision:
    """Decide the relaunch of the lost launch at ``record_path`` (module docstring); ``cause``:
    the watch's message.

    Raises:
        RelaunchImpossibleError: the record cannot be read, or the spec has no ``restart:`` block.
        JobAlreadyRunningError: the pipeline's lease is live (not counted: ask again once it expired).
        SpecError: the spec does not load.
    """
    record = read_lost_launch(record_path)
    spec = load_any_spec(record.spec_path)
    if spec.restart is None:
        raise RelaunchImpossibleError(f"pipeline {spec.name}: not relaunching a lost launch without a restart: block "
                                      f"in {record.spec_path} (bring it back with its recovery DAG)")
    pipeline = open_pipeline(record.spec_path)
    lease = lease_state(pipeline.objects, now or datetime.now(UTC))
    if lease is not None and lease.get("live"):
        raise JobAlreadyRunningError(
            f"pipeline {spec.name}: its lease is live ({describe(lease)}, last heartbeat {lease.get('heartbeat_at')}); "
            "not relaunching while the old driver may still run (a partitioned host): the lease decides")
    decision = RestartLedger(record.ledger_path, spec.restart).decide(cause, key=record.launch_id)
    strategy = decision.strategy
    observers = restart_alert_observers(spec)
    if decision.delay is None:
        granted = [f for f in decision.failures if f.get("delay") is not None]
        run = SupervisedRun(strategy.describe(), [Restart(n, str(f.get("cause")), float(f["delay"]))
                                                  for n, f in enumerate(granted, start=1)])
        message = (f"pipeline {spec.name}: not relaunched after {len(decision.failures)} failure(s) of launch chain "
                   f"{record.chain_id}: restart strategy {strategy.describe()} allows no further restart "
                   f"({len(granted)} granted). Causes: {decision.causes()}. Fix the cause and bring it back from "
                   "its latest checkpoint with its recovery DAG")
        _observe(spec.name, observers.get("on_give_up"), message, run)
        return RelaunchDecision(record, None, strategy.restarts, strategy.limit, strategy.describe(), message)
    _observe(spec.name, observers.get("on_restart"), Restart(strategy.restarts, cause, decision.delay), strategy)
    message = (f"pipeline {spec.name}: relaunch {strategy.restarts} of {strategy.limit} after {decision.delay:.1f} s "
               f"(strategy {strategy.describe()}; launch chain {record.chain_id}, ledger "
               f"{Path(record.ledger_path)}): {cause}")
    return RelaunchDecision(record, decision.delay, strategy.restarts, strategy.limit, strategy.describe(), message)
