"""The failure-recovery runbook, step by step, free of Airflow (``barrierflow_recover__<name>``).

The recovery DAG wires these functions into tasks; each is a plain function that can be
called (and tested) on its own::

    validate_recovery_params(params)        bad param -> RecoveryParamError (names param, value, allowed)
    ensure_job_stopped(spec_path)           lease held -> JobStillRunningError (says how to stop it)
    choose_checkpoint(spec_path, wanted)    ops.restore.choose, the rule every restore follows
                                            (barrierflow.verification.choice): "latest-valid": newest
                                            that verifies (skipped ones listed); "latest" / id: that
                                            one, verified structurally first;
                                            fails -> ChosenCheckpointInvalidError
    restore_checkpoint(spec_path, id, ...)  ops.restore.restore_chosen: materialize, new attempt,
                                            reconcile the sinks' in-doubt transactions, plan a
                                            suppressed replay
    (the DAG triggers barrierflow_pipeline__<name> when the param restart is true)
    first_checkpoint_of_attempt(...)        the sensor's condition: a completed checkpoint written by
                                            the restored job (Manifest.attempt == the new attempt)
    recovery_summary(...)                   what the final report task logs and returns

A multi-stage spec takes the same steps, through the same operations, on its global
checkpoints: the lease is the pipeline's one lease (its work dir; a run holds it however its
stages run), :func:`barrierflow.ops.restore.choose` verifies a global checkpoint as one cut
(every stage's checks and the cut over the channels), :func:`barrierflow.ops.restore.restore_chosen`
restores every stage to it (a new attempt, attempt cutoffs so downstream stages skip what older
attempts wrote), and the sensor waits for the first completed global checkpoint of the new attempt.

Every error raised on purpose derives from :class:`barrierflow.errors.BarrierflowError`; those
caused by the operator's input (params, a running job, a checkpoint that does not verify)
derive from :class:`barrierflow.errors.UserInputError`, which the DAG turns into a failure
without retries. Every value returned is JSON-serializable (it becomes an XCom).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.ops.checkpoints import list_checkpoints
from barrierflow.ops.progress import open_pipeline
from barrierflow.ops.restore import choose, restore_chosen
from barrierflow.verification.choice import (
    CHECKPOINT_CHOICES,
    LATEST,
    LATEST_VALID,
    CheckpointChoice,
    CheckpointRequest,
    ChosenCheckpointInvalidError,
)

log = logging.getLogger(__name__)

__all__ = ["CHECKPOINT_CHOICES", "DEFAULT_PARAMS", "LATEST", "LATEST_VALID", "CheckpointChoice",
           "CheckpointRequest", "ChosenCheckpointInvalidError", "JobStillRunningError", "RecoveryParamError",
           "RecoveryParams", "choose_checkpoint", "describe_restore", "duplicate_output_hint", "ensure_job_stopped",
           "first_checkpoint_of_attempt", "recovery_summary", "restore_checkpoint", "validate_recovery_params"]

#: The recovery DAG's params and their defaults (the DAG declares the same defaults).
DEFAULT_PARAMS: dict[str, Any] = {
    "checkpoint": LATEST_VALID,
    "accept_duplicates": False,
    "restart": True,
    "wait_seconds": 600,
}

_CHECKPOINT_ALLOWED = '"latest-valid", "latest" or a positive whole checkpoint id (1, 2, ...)'
_DIGITS = re.compile(r"^[1-9][0-9]*$")


class RecoveryParamError(UserInputError):
    """A param of the recovery DAG has a value that is not allowed.

    Attributes:
        param: the param's name.
        value: the value given.
        allowed: what the param accepts, in words.
    """

    def __init__(self, param: str, value: Any, allowed: str) -> None:
        self.param = param
        self.value = value
        self.allowed = allowed
        super().__init__(f"param {param!r} is {value!r} ({type(value).__name__}), which is not allowed: "
                         f"{param!r} must be {allowed}. Trigger the DAG again with a valid value.")


class JobStillRunningError(UserInputError):
    """The pipeline's job holds its run lease: recovery must not restore under a running job.

    Attributes:
        pipeline: the pipeline's name.
        lease_path: the lease file (``<work_dir>/job.lease``).
        lease: its content (``pid``, ``host``, ``started_at``), empty if unreadable.
    """

    def __init__(self, pipeline: str, lease_path: Path, lease: dict[str, Any], detail: str) -> None:
        self.pipeline = pipeline
        self.lease_path = lease_path
        self.lease = lease
        super().__init__(detail)


@dataclass(frozen=True)
class RecoveryParams:
    """The recovery DAG's params, validated (see :func:`validate_recovery_params`).

    Attributes:
        checkpoint: ``"latest-valid"``, ``"latest"`` or a checkpoint id (>= 1).
        accept_duplicates: restore even if output of newer, already committed epochs would be
            written again (no suppressed replay).
        restart: trigger the pipeline's launch DAG after the restore.
        wait_seconds: how long to wait for the first new completed checkpoint (>= 1).
    """

    checkpoint: CheckpointRequest
    accept_duplicates: bool
    restart: bool
    wait_seconds: int

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "accept_duplicates": self.accept_duplicates,
                "restart": self.restart, "wait_seconds": self.wait_seconds}


def _checkpoint_param(value: Any) -> CheckpointRequest:
    if isinstance(value, str):
        text = value.strip()
        if text in CHECKPOINT_CHOICES:
            return LATEST_VALID if text == LATEST_VALID else LATEST
        if _DIGITS.match(text):
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    elif isinstance(value, float) and value.is_integer() and value >= 1:
        return int(value)
    raise RecoveryParamError("checkpoint", value, _CHECKPOINT_ALLOWED)


def _bool_param(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise RecoveryParamError(name, value, "true or false (a JSON boolean)")


def _wait_param(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 1:
        return int(value)
    raise RecoveryParamError("wait_seconds", value, "a whole number of seconds greater than 0, e.g. 600")


def validate_recovery_params(params: Mapping[str, Any]) -> RecoveryParams:
    """Check and normalize the recovery DAG's params.

    Args:
        params: the run's params (``context["params"]``); a missing key takes its value from
            :data:`DEFAULT_PARAMS`, keys other than those are ignored.

    Returns:
        The validated params. ``checkpoint`` comes back as ``"latest-valid"``, ``"latest"`` or
        an ``int`` (a string of digits such as ``"12"``, as a UI text field sends it, becomes 12).

    Raises:
        RecoveryParamError: a value is not allowed; the message names the param, the value
            and what is allowed. Params are checked in the order checkpoint,
            accept_duplicates, restart, wait_seconds; the first bad one is reported.
    """
    merged = {**DEFAULT_PARAMS, **{k: v for k, v in params.items() if k in DEFAULT_PARAMS}}
    return RecoveryParams(
        checkpoint=_checkpoint_param(merged["checkpoint"]),
        accept_duplicates=_bool_param("accept_duplicates", merged["accept_duplicates"]),
        restart=_bool_param("restart", merged["restart"]),
        wait_seconds=_wait_param(merged["wait_seconds"]),
    )


def ensure_job_stopped(spec_path: str | os.PathLike[str], *, launch_dag_id: str | None = None) -> str:
    """Check that the pipeline's job is not running (its run lease is not held).

    The lease is the one the launch guard asks about
    (:func:`barrierflow.recovery.restart_guard.pipeline_lease_holder`): the checkpoint store's
    lease (any host) or ``<work_dir>/job.lease``, which a multi-stage run holds (see
    :mod:`barrierflow.lease`).

    Args:
        spec_path: the pipeline spec file.
        launch_dag_id: the DAG that runs the job, named in the message when given.

    Returns:
        A one-line status (the job is stopped).

    Raises:
        SpecError: the spec does not load.
        JobStillRunningError: the lease is held; the message says to stop the job first and
            how (fail the launch task in Airflow, or SIGTERM the process the lease names).
    """
    from barrierflow.recovery.restart_guard import pipeline_lease_holder

    name, work_dir, holder = pipeline_lease_holder(spec_path)
    lease_path = work_dir / "job.lease"
    if holder is None:
        return f"pipeline {name!r} is not running (no live lease at {lease_path})"
    lease: dict[str, Any] = dict(holder)
    pid, host = lease.get("pid", "?"), lease.get("host", "?")
    launch = (f"mark the running 'launch' task of DAG {launch_dag_id!r} as failed in the Airflow UI (Airflow "
              "then stops spark-submit), or " if launch_dag_id else "")
    raise JobStillRunningError(
        name, lease_path, lease,
        f"pipeline {name!r} is running (pid {pid} on host {host}, since {lease.get('started_at', '?')}; "
        f"lease {lease_path}): stop it before recovering, or the restore would replace its checkpoint under it. "
        f"To stop it, {launch}send SIGTERM to that process on {host} ('kill {pid}'); the job releases its lease "
        "when it stops. If the process is already gone on another host, delete the lease file. Then trigger "
        "this recovery again.",
    )


def choose_checkpoint(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> CheckpointChoice:
    """Resolve the ``checkpoint`` param to the checkpoint to restore, with
    :func:`barrierflow.ops.restore.choose`: the same rule and verification as ``barrierflow
    restore`` (see :mod:`barrierflow.verification.choice`); for a multi-stage spec, a global
    checkpoint verified as one cut (a failed check is named ``<stage>: <check>``).

    Raises:
        SpecError: the spec does not load.
        CheckpointNotFoundError: no checkpoint exists / none passes (``latest-valid``: the
            message lists why each failed), or the id does not exist or was abandoned by an
            earlier restore.
        ChosenCheckpointInvalidError: the requested checkpoint fails a structural check; the
            message names the checkpoint and each failed check and suggests ``latest-valid``.
        StorageError: the checkpoint store cannot be read.
    """
    return choose(spec_path, requested)


def describe_restore(report: Mapping[str, Any]) -> list[str]:
    """Human-readable lines for a restore report (:meth:`RestoreOutcome.as_dict`): the cut
    restored (``noun`` names it) and the new attempt, what each stage's restore did (its
    checkpoint's batch, files and bytes, its attempt cutoff), the newer cuts abandoned, each
    sink decision, and last the suppressed replay."""
    noun = report["noun"]
    lines = [f"restored {noun} {report['checkpoint_id']} of {report['pipeline']} in every stage "
             f"({report['verification']}); new attempt {report['attempt']}"]
    for name, stage in report["stages"].items():
        if "spark_batch_id" in stage:
            lines.append(f"stage {name}: batch {stage['spark_batch_id']}, {stage['files']} files, {stage['bytes']} "
                         f"bytes, sha256 checked; it resumes at batch {stage['spark_batch_id'] + 1}")
        if stage.get("cutoff"):
            lines.append(f"stage {name}: skips what older attempts wrote after {stage['cutoff']}")
    if report.get("abandoned"):
        lines.append(f"abandoned newer {noun}s: {report['abandoned']}")
    for d in report.get("decisions") or []:
        lines.append(f"sink {d['sink']}: {d['action']} {d['transaction_id']} (epoch {d['checkpoint_id']}, "
                     f"{d['state']}): {d['reason']}")
    if not report.get("decisions"):
        lines.append("no sink transaction was in doubt")
    replay = report.get("replay")
    if replay:
        lines.append(f"epochs {replay['epochs']} were already committed after checkpoint "
                     f"{replay['restored_from']}: their {replay['batches']} batches are replayed up to "
                     f"{replay['through']} with the output suppressed (no duplicates)")
    return lines


def restore_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int, *,
                       accept_duplicates: bool = False) -> dict[str, Any]:
    """Restore the pipeline from ``checkpoint_id`` (chosen by :func:`choose_checkpoint`) with
    :func:`barrierflow.ops.restore.restore_chosen` and log what happened.

    The restore materializes the checkpoint into the job's local Spark checkpoint dir (the old
    one is kept as ``spark-checkpoint.replaced``), starts a new attempt (newer checkpoints are
    abandoned), finishes every in-doubt sink transaction (commit what the checkpoint covers,
    abort the rest) and, when a sink already committed newer epochs, stores a replay plan that
    suppresses their output. It refuses to run while the job holds its lease.

    Returns:
        :meth:`RestoreOutcome.as_dict`, one shape for every pipeline: ``pipeline``, ``noun``,
        ``checkpoint_id``, ``attempt`` (the new one, which the restarted job writes into its
        manifests), ``abandoned``, ``decisions``, ``replay`` (None or the plan's summary) and
        under ``stages`` each stage's report (``spark_batch_id``, ``files``, ``bytes``,
        ``replaced``, ... when its checkpoint was restored by itself) and ``cutoff``. A global
        checkpoint is verified again under the pipeline's lease.

    Raises:
        SpecError: the spec does not load.
        CheckpointNotFoundError, CheckpointCorruptError: the checkpoint is gone or damaged.
        DuplicateOutputError: newer epochs were committed and cannot be replayed faithfully
            (restore the latest checkpoint, or accept duplicates).
        UserInputError: the job is running.
        StorageError: the checkpoint store cannot be read or written.
    """
    report = restore_chosen(spec_path, checkpoint_id, accept_duplicates=accept_duplicates).as_dict()
    lines = describe_restore(report)
    for line in lines[:-1] if report.get("replay") else lines:
        log.info("%s", line)
    if report.get("replay"):
        log.warning("%s", lines[-1])  # the replay line comes last
    return report


def first_checkpoint_of_attempt(spec_path: str | os.PathLike[str], attempt: int) -> int | None:
    """The id of the first completed checkpoint the job wrote in ``attempt`` (or later), or None.

    This is the recovery sensor's condition: after a restore returned attempt ``a``, the
    restarted job writes ``a`` into every manifest, so a completed checkpoint (readable
    manifest, current timeline) with ``Manifest.attempt == a`` shows the job is running again
    and checkpointing. For a multi-stage spec: the first completed global checkpoint (global
    manifest, not abandoned) of attempt ``a`` or later: a multi-stage run restores its latest
    global checkpoint again when it starts, as attempt ``a + 1``.

    Raises:
        ValueError: ``attempt`` is below 1 (a restore always starts attempt 1 or later).
        SpecError: the spec does not load.
        StorageError: the checkpoint store cannot be read.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more (as returned by a restore), got {attempt}")
    # `>=`: every start of a multi-stage pipeline restores its latest global checkpoint (the one
    # just restored) once more as a new attempt, so the restarted job writes a + 1; a single-stage
    # job writes a itself, and a later attempt exists only after another restore.
    listing = list_checkpoints(spec_path)
    return next((c.checkpoint_id for c in listing.cuts
                 if c.attempt >= attempt and c.checkpoint_id not in listing.abandoned), None)


def duplicate_output_hint(spec_path: str | os.PathLike[str]) -> str:
    """What the recovery DAG adds to a :class:`~barrierflow.recovery.restore.DuplicateOutputError`:
    trigger again with ``checkpoint='latest'``, or (one stage, whose restore can write already
    committed output again) with ``accept_duplicates=true``."""
    hint = "With this DAG: trigger it again with checkpoint='latest'"
    if open_pipeline(spec_path).layout.replays_committed_epochs:
        hint += ", or with accept_duplicates=true to write that output again"
    return hint


def recovery_summary(choice: Mapping[str, Any], report: Mapping[str, Any], *, restarted: bool,
                     first_checkpoint_id: int | None) -> dict[str, Any]:
    """The final report of a recovery run.

    Args:
        choice: :meth:`CheckpointChoice.as_dict` of the chosen checkpoint.
        report: the restore report (:func:`restore_checkpoint`).
        restarted: whether the launch DAG was triggered (the param ``restart``).
        first_checkpoint_id: the first checkpoint of the new attempt, None if not waited for.

    Returns:
        ``{"pipeline", "requested", "checkpoint_id", "skipped", "attempt", "abandoned",
        "decisions", "replay", "restarted", "first_checkpoint_id", "message"}``; ``message`` is
        the summary in words (several lines).
    """
    skipped = list(choice.get("skipped") or [])
    what = report["noun"]
    lines = [f"recovery of pipeline {report['pipeline']!r}: checkpoint={choice['requested']!r} chose {what} "
             f"{choice['checkpoint_id']} ({choice.get('verification', 'passed')})"]
    lines += [f"skipped {what} {s['checkpoint_id']}: {s['reason']}" for s in skipped]
    lines += describe_restore(report)
    if not restarted:
        lines.append("not restarted (restart=false): start it with the pipeline's launch DAG; it resumes from here")
    elif first_checkpoint_id is None:
        lines.append("restarted; no new checkpoint was waited for")
    else:
        lines.append(f"restarted; {what} {first_checkpoint_id} is the first completed {what} of attempt "
                     f"{report['attempt']}: the pipeline runs and checkpoints again")
    return {
        "pipeline": report["pipeline"],
        "requested": choice["requested"],
        "checkpoint_id": choice["checkpoint_id"],
        "skipped": skipped,
        "attempt": report["attempt"],
        "abandoned": list(report.get("abandoned") or []),
        "decisions": list(report.get("decisions") or []),
        "replay": report.get("replay"),
        "restarted": restarted,
        "first_checkpoint_id": first_checkpoint_id,
        "message": "\n".join(lines),
    }
