"""Who restarts a streaming job: the recovery DAG, never the launch task's retries.

The rule (docs/airflow.md, "Launch and recovery"): a job whose driver died is brought back by one owner only,
the pipeline's recovery DAG (``barrierflow_recover__<name>``): it restores a checkpoint and
then triggers the launch DAG itself. The launch task is never retried by Airflow (its
``retries`` is 0), and every start of the launch task, however it came about (a trigger, a
"Clear" in the UI, a restart by the recovery DAG), first asks :func:`check_launch_allowed`,
which refuses before Spark is started when

1. the pipeline's lease is held: the job already runs, a restore rebuilds its checkpoint, or a
   reconciliation finishes its transactions (:mod:`barrierflow.lease`);
2. a run of the recovery DAG is active (queued or running) and did not start this launch
   (the launch run's conf carries ``recovery_run_id`` when the recovery started it); the
   message names the recovery run (from the marker below) so the operator knows what to wait for;
3. the recovery run that started this launch restored attempt ``a`` (conf
   ``restored_attempt``) but the checkpoint store is at a newer attempt: a later restore
   superseded it, and starting now would run a stale restart next to the newer one.

The recovery marker is ``<work_dir>/control/recovery.json``: ``{"dag_id", "run_id",
"started_at"}``, written by the recovery DAG's first task. It is only a name: whether that
run is still active is asked of Airflow (the caller passes the count of active recovery runs
and, for the run that started this launch, whether it is active), so a marker left by a run
that failed never blocks a launch.

Nothing here imports Airflow; the launch operator (:mod:`barrierflow.airflow.launch`) feeds
it what Airflow knows.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import UserInputError

log = logging.getLogger(__name__)

MARKER_NAME = "recovery.json"


class LaunchRefusedError(UserInputError):
    """The launch task must not start the job now (see the module docstring for when).

    Attributes:
        pipeline: the pipeline's name.
        reason: ``"lease"``, ``"recovery-active"``, ``"superseded"`` or ``"bad-conf"``.
    """

    def __init__(self, pipeline: str, reason: str, detail: str) -> None:
        self.pipeline = pipeline
        self.reason = reason
        super().__init__(detail)


@dataclass(frozen=True)
class RecoveryMarker:
    """The recovery run that last began on this pipeline (its name, not its state)."""

    dag_id: str
    run_id: str
    started_at: str

    def describe(self) -> str:
        return f"run {self.run_id!r} of DAG {self.dag_id!r} (started {self.started_at})"


def _marker_path(work_dir: Path) -> Path:
    return work_dir / "control" / MARKER_NAME


def pipeline_work_dir(spec_path: str | os.PathLike[str]) -> tuple[str, Path]:
    """The pipeline's name and the work dir that holds its lease and recovery marker, for a
    single- or multi-stage spec (``work_dir``, default ``var/<name>``, under
    ``$BARRIERFLOW_HOME``): a multi-stage run holds the pipeline's one lease there, whichever
    way its stages run. Raises SpecError for a spec that does not load."""
    from barrierflow.spec.loader import load_any_spec
    from barrierflow.workdir.layout import JobLayout

    spec = load_any_spec(spec_path)
    return spec.name, JobLayout.for_spec(spec).work_dir  # type: ignore[arg-type]  # the same rule for both kinds


def pipeline_lease_holder(spec_path: str | os.PathLike[str]) -> tuple[str, Path, dict[str, object] | None]:
    """The pipeline's name, work dir and live lease holder (None: not held): the checkpoint
    store's lease (any host) or the work dir's lease file, which a multi-stage run holds. What
    the launch guard and the recovery's job check both ask. Raises SpecError for a bad spec."""
    from barrierflow.lease import lease_holder
    from barrierflow.spec.loader import load_any_spec
    from barrierflow.storage import open_store

    name, work_dir = pipeline_work_dir(spec_path)
    return name, work_dir, lease_holder(work_dir, open_store(load_any_spec(spec_path).checkpoint.storage))


def mark_recovery(spec_path: str | os.PathLike[str], dag_id: str, run_id: str) -> RecoveryMarker:
    """Record that recovery run ``run_id`` of ``dag_id`` began (atomically replaces the marker)."""
    _, work_dir = pipeline_work_dir(spec_path)
    marker = RecoveryMarker(dag_id, run_id, datetime.now(UTC).isoformat())
    path = _marker_path(work_dir)
    write_atomic(path, json.dumps(marker.__dict__))
    return marker


def read_recovery_marker(work_dir: Path) -> RecoveryMarker | None:
    """The marker of ``work_dir``; None when there is none or it is unreadable (it only names)."""
    try:
        doc = json.loads(_marker_path(work_dir).read_text(encoding="utf-8"))
        return RecoveryMarker(str(doc["dag_id"]), str(doc["run_id"]), str(doc.get("started_at", "?")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log.warning("unreadable recovery marker %s (%s): ignored", _marker_path(work_dir), exc)
        return None


def check_launch_allowed(
    spec_path: str | os.PathLike[str],
    *,
    recovery_dag_id: str,
    launch_conf: Mapping[str, Any],
    active_recovery_runs: int,
    starter_active: bool,
) -> str:
    """Decide whether the launch task may start the job now.

    Args:
        spec_path: the pipeline spec.
        recovery_dag_id: the pipeline's recovery DAG.
        launch_conf: the launch run's conf; a run the recovery DAG started carries
            ``recovery_run_id`` and ``restored_attempt``.
        active_recovery_runs: how many runs of ``recovery_dag_id`` are queued or running.
        starter_active: whether the run named by ``launch_conf["recovery_run_id"]`` is one of
            them (False when there is no such key).

    Returns:
        One line saying why the launch may go ahead.

    Raises:
        SpecError: the spec does not load.
        LaunchRefusedError: the launch must not start (the message names the lease holder or
            the recovery run, and what to do).
    """
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.lease import describe
    from barrierflow.spec.loader import load_any_spec

    spec = load_any_spec(spec_path)
    # Rule 1: the lease (the checkpoint store's lease: any host; a multi-stage run's lease file).
    name, work_dir, holder = pipeline_lease_holder(spec_path)
    marker = read_recovery_marker(work_dir)
    recovery = marker.describe() if marker is not None else f"a run of DAG {recovery_dag_id!r}"

    if holder is not None:
        purpose = str(holder.get("purpose", "run"))
        what = {"run": "already runs", "restore": f"is being restored by {recovery}",
                "reconcile": "is being reconciled"}.get(purpose, "is busy")
        raise LaunchRefusedError(
            name, "lease",
            f"not starting pipeline {name!r}: it {what} ({describe(holder)}; lease {work_dir / 'job.lease'}). "
            "Spark was not started. Wait for that process to end; after a crash, trigger "
            f"{recovery_dag_id!r}, which restores and restarts the job.")

    # Rule 2: an active recovery run that did not start this launch.
    started_by = launch_conf.get("recovery_run_id")
    others = active_recovery_runs - (1 if started_by and starter_active else 0)
    if others > 0:
        raise LaunchRefusedError(
            name, "recovery-active",
            f"not starting pipeline {name!r}: recovery {recovery} is in progress and owns the restart (it "
            "restores a checkpoint, then triggers this DAG itself). Spark was not started. Wait for that recovery "
            "run to finish; it restarts the job when its param restart is true.")

    # Rule 3: a newer restore superseded the one that asked for this launch.
    restored = launch_conf.get("restored_attempt")
    if started_by and restored not in (None, ""):
        try:
            restored_attempt = int(str(restored))
        except ValueError:
            raise LaunchRefusedError(
                name, "bad-conf",
                f"not starting pipeline {name!r}: the run's conf 'restored_attempt' is {restored!r}, not a whole "
                "number. Spark was not started. Only the recovery DAG sets it; trigger the launch DAG without "
                "'recovery_run_id'/'restored_attempt' to start the job by hand.") from None
        # The attempt: the pipeline's (a multi-stage pipeline's root store holds it).
        current = CheckpointStore.for_spec(spec).attempt()  # type: ignore[arg-type]
        if current > restored_attempt:
            raise LaunchRefusedError(
                name, "superseded",
                f"not starting pipeline {name!r}: recovery run {started_by!r} restored attempt {restored}, but a "
                f"newer restore began attempt {current} since. Spark was not started. The newer recovery restarts "
                "the job; trigger this DAG without conf to start it by hand.")
    if started_by:
        return f"pipeline {name!r}: restart requested by recovery run {started_by!r} (attempt {restored})"
    return f"pipeline {name!r} is not running and no recovery is in progress"
