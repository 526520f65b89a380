"""What the Airflow DAGs in ``dags/`` need from the library, kept free of Airflow imports.

* :func:`discover_specs` and :func:`discover_pipelines` (from :mod:`barrierflow.ops.discovery`)
  find the pipeline specs a DAG file turns into DAGs. They read only the spec files (no
  database, no connection, no Spark), so they are safe at DAG-parse time; a spec that fails
  to load is returned with its error instead of raising, so one bad file never hides the
  other pipelines.
* :func:`dag_id_for` is the one place DAG ids are spelled: ``barrierflow_<kind>__<name>``.
* :func:`check_checkpoint_freshness` is the supervision check: the pipeline's latest
  *completed* checkpoint (one with a manifest) must exist and be younger than a limit. A
  running job completes a checkpoint every ``checkpoint.interval``; when none completed for
  several intervals the job is dead, stuck, or cannot reach its checkpoint store.
* :func:`verification_schedule` reads how often and how deeply a spec wants its checkpoints
  verified; :func:`verify_latest_checkpoints` is the scheduled verification (``barrierflow
  verify SPEC --latest N [--deep] --json``) and fails with :class:`CheckpointVerificationError`
  naming every failed checkpoint and check; :func:`retain_checkpoints` is the scheduled
  retention (``barrierflow retain SPEC --json``). Both return the CLI's JSON document.
* :func:`reconcile_transactions` is the scheduled 2PC reconciliation (``barrierflow reconcile
  SPEC --json``), returning its JSON document with the decisions.
* :func:`report_watermark_skew` is the scheduled watermark-skew report (``barrierflow skew SPEC
  --json``); it fails with :class:`barrierflow.reports.skew.SkewExpectationError` naming each
  checkpoint and value that broke ``reports.max_skew`` / ``reports.max_lag``.
* The triggered failure recovery (``barrierflow_recover__<name>``) is a runbook of its own:
  :mod:`barrierflow.airflow.runbook`.

A multi-stage spec (``stages`` and ``channels``) gets the same checks on its *global*
checkpoints: each function calls the one operation of :mod:`barrierflow.ops` that
``barrierflow <command> SPEC --json`` calls, for either shape (the operation opens the
pipeline once and works on its cuts), so the XCom is the CLI's JSON document. Supervision
looks at the newest completed global checkpoint; a failed verification names the global
checkpoint, the stage and the check (``<stage>: <check>``); a failed skew expectation names
the stage.

Every operation is the one :mod:`barrierflow.ops` runs for the CLI; this module only turns
its result into the JSON document (an XCom) and its failures into errors that name the fix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.errors import BarrierflowError, CheckpointError
from barrierflow.ops.discovery import DiscoveredPipeline, discover_pipelines, discover_specs
from barrierflow.reports.quality import QualityExpectationError
from barrierflow.spec.models import VerificationSpec

if TYPE_CHECKING:
    from barrierflow.spec.models import PipelineSpec
    from barrierflow.spec.stages import StagedPipelineSpec

log = logging.getLogger(__name__)

#: QualityExpectationError is raised by check_output_quality (the quality task fails on it, from here);
#: the discovery helpers live in barrierflow.ops.discovery (the Checkpoints page uses them too).
__all__ = ["DiscoveredPipeline", "QualityExpectationError", "discover_pipelines", "discover_specs"]

#: The kinds of DAG made per pipeline: the triggered, long-running job, its scheduled
#: supervision, the scheduled checkpoint verification and retention, the triggered failure
#: recovery, the scheduled 2PC reconciliation, the scheduled watermark-skew report and, for a
#: Parquet sink, the batch side: daily rollups, the stream-vs-batch comparison, data quality.
DAG_KINDS = ("pipeline", "supervise", "verify", "retain", "recover", "reconcile", "skew", "rollup", "recompute",
             "quality", "chaos")


class CheckpointStaleError(CheckpointError):
    """A pipeline has no completed checkpoint, or its latest one is older than allowed.

    Attributes:
        pipeline: the pipeline's name.
        age_seconds: age of the latest completed checkpoint; ``None`` when there is none.
        max_age_seconds: the limit it was checked against.
    """

    def __init__(self, pipeline: str, age_seconds: float | None, max_age_seconds: float, detail: str) -> None:
        self.pipeline = pipeline
        self.age_seconds = age_seconds
        self.max_age_seconds = max_age_seconds
        super().__init__(detail)


class CheckpointVerificationError(CheckpointError):
    """The scheduled verification found checkpoints that fail a check.

    Attributes:
        pipeline: the pipeline's name.
        failures: ``(checkpoint id, check name, message)`` of every failed check, in the
            order verified (oldest checkpoint first).
        summary: the JSON document ``barrierflow verify --json`` prints for the same run.
    """

    def __init__(self, pipeline: str, failures: list[tuple[int, str, str]], summary: dict[str, Any],
                 detail: str) -> None:
        self.pipeline = pipeline
        self.failures = failures
        self.summary = summary
        super().__init__(detail)


@dataclass(frozen=True)
class VerificationSchedule:
    """How the scheduled verification DAG of one pipeline runs.

    Attributes:
        interval_seconds: time between runs (``verification.interval``, default 10 minutes).
        latest: how many of the newest checkpoints each run verifies (``verification.latest``,
            default ``checkpoint.retained``: the checkpoints retention keeps).
        deep: also restore each checkpoint and run the expectation suite on its state
            (``verification.deep``, default false; needs Spark where the task runs).
    """

    interval_seconds: float
    latest: int
    deep: bool


def dag_id_for(spec_name: str, kind: str) -> str:
    """The DAG id of pipeline ``spec_name`` for ``kind`` (one of :data:`DAG_KINDS`)."""
    if kind not in DAG_KINDS:
        raise ValueError(f"unknown DAG kind {kind!r}; expected one of {', '.join(DAG_KINDS)}")
    if not spec_name:
        raise ValueError("a pipeline name is needed to build a DAG id")
    return f"barrierflow_{kind}__{spec_name}"


def bounded_sources(spec: PipelineSpec | StagedPipelineSpec) -> bool:
    """Whether the job ends by itself: its source has an end (``records_per_partition``); for a
    multi-stage spec, every source that is not a channel (those of the source stages). Reads
    nothing but the spec; the launch DAG's ``until_exhausted`` defaults to it."""
    stages = getattr(spec, "stages", None)
    sources = [src for stage in stages for src in stage.sources] if stages is not None else list(spec.sources)
    own = [src for src in sources if getattr(src, "type", None) != "channel"]
    return bool(own) and all(getattr(src, "records_per_partition", None) is not None for src in own)


def check_checkpoint_freshness(
    spec_path: str | os.PathLike[str],
    max_age_seconds: float,
    now: datetime | None = None,
    latest_completion: Callable[[PipelineSpec | StagedPipelineSpec], datetime | None] | None = None,
) -> str:
    """Check that the pipeline at ``spec_path`` completed a checkpoint recently (a multi-stage
    pipeline: a global checkpoint, whose manifest is written once every stage's snapshot is in).

    Args:
        spec_path: the pipeline spec file.
        max_age_seconds: the oldest acceptable latest completed checkpoint (> 0).
        now: the current time (timezone-aware); defaults to the current UTC time.
        latest_completion: returns the completion time of the newest completed checkpoint,
            or ``None`` if there is none; defaults to reading the spec's checkpoint store.

    Returns:
        A one-line status naming the pipeline, the checkpoint's age and the limit.

    Raises:
        SpecError: the spec does not load.
        CheckpointStaleError: there is no completed checkpoint, or the latest is too old.
        ValueError: ``max_age_seconds`` is not positive, or a datetime is naive.
    """
    from barrierflow.ops.progress import newest_completion_time, open_pipeline

    if max_age_seconds <= 0:
        raise ValueError(f"max_age_seconds must be greater than 0, got {max_age_seconds}")
    current = datetime.now(UTC) if now is None else now
    if current.tzinfo is None:
        raise ValueError("now must be timezone-aware (e.g. datetime.now(UTC))")
    pipeline = open_pipeline(spec_path)
    spec, what = pipeline.spec, pipeline.cut_noun
    completed_at = latest_completion(spec) if latest_completion is not None else newest_completion_time(pipeline)
    storage = spec.checkpoint.storage
    if completed_at is None:
        raise CheckpointStaleError(
            spec.name, None, max_age_seconds,
            f"pipeline {spec.name!r} has no completed {what} in {storage}: the job never "
            f"completed one (not started, failing, or unable to write to the store). Check the "
            f"job's log, then the store.",
        )
    if completed_at.tzinfo is None:
        raise ValueError(f"checkpoint completion time {completed_at!r} is naive; expected timezone-aware")
    age = max(0.0, (current - completed_at).total_seconds())
    if age > max_age_seconds:
        raise CheckpointStaleError(
            spec.name, age, max_age_seconds,
            f"pipeline {spec.name!r}: latest completed {what} in {storage} finished "
            f"{age:.1f}s ago at {completed_at.astimezone(UTC).isoformat()}, older than the limit of "
            f"{max_age_seconds:g}s (checkpoint interval {spec.checkpoint.interval:g}s): the job is "
            f"dead, stuck, or cannot complete checkpoints.",
        )
    return (
        f"pipeline {spec.name!r}: latest completed {what} finished {age:.1f}s ago "
        f"(limit {max_age_seconds:g}s, interval {spec.checkpoint.interval:g}s)"
    )


def verification_schedule(spec: PipelineSpec | StagedPipelineSpec) -> VerificationSchedule:
    """The scheduled verification settings of ``spec`` (defaults when it has no
    ``verification`` section; see :class:`VerificationSchedule`). Reads nothing but the spec."""
    settings = spec.verification or VerificationSpec()
    return VerificationSchedule(
        interval_seconds=settings.interval,
        latest=settings.latest or spec.checkpoint.retained,
        deep=settings.deep,
    )


def verify_latest_checkpoints(spec_path: str | os.PathLike[str], latest: int, *, deep: bool = False
                              ) -> dict[str, Any]:
    """Verify the pipeline's newest ``latest`` checkpoints, as
    ``barrierflow verify SPEC --latest N [--deep] --json`` does.

    Every result is stored beside its checkpoint (``chk-<n>/_verification.json``), where
    ``restore --latest-valid`` and retention use it. With ``deep``, a local SparkSession is
    built from the spec for the state reads (it lives as long as the calling process).

    Args:
        spec_path: the pipeline spec file.
        latest: how many of the newest checkpoints to verify (>= 1).
        deep: also restore each structurally intact checkpoint and run its expectation suite.

    Returns:
        The JSON document of ``barrierflow verify --json`` (see
        :func:`barrierflow.verification.runner.verification_summary`), when every verified
        checkpoint passed; also when there is no checkpoint yet (``"verified": 0``: the
        supervision DAG reports a pipeline that never completes one).

    Raises:
        SpecError: the spec does not load.
        UserInputError: ``latest`` is below 1.
        CheckpointVerificationError: a checkpoint failed a check; the message names every
            failed checkpoint and check, ``summary`` holds the JSON document.
        StorageError: the checkpoint store cannot be read.
    """
    from barrierflow.ops.verify import verify

    outcome = verify(spec_path, latest=latest, deep=deep)
    summary = outcome.summary()
    failed = outcome.failures()
    if failed:
        raise CheckpointVerificationError(outcome.pipeline, [(cid, name, message) for cid, name, message, _ in failed],
                                          summary, outcome.failure_message(str(spec_path)))
    log.info("pipeline %r: %d %s(s) in %s passed verification%s", outcome.pipeline, len(outcome.reports),
             outcome.noun, outcome.storage, " (deep)" if deep else "")
    return summary


def retain_checkpoints(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> dict[str, Any]:
    """One retention run of the pipeline, as ``barrierflow retain SPEC [--dry-run] --json``.

    Keeps the newest ``checkpoint.retained`` completed checkpoints (verified ones preferred
    unless ``verification.prefer_verified`` is false) and every savepoint; deletes the rest,
    incomplete checkpoints past ``checkpoint.timeout`` and unreferenced shared files (see
    :mod:`barrierflow.retention.plan`). Safe while the job runs: in-flight checkpoints reserve
    their files.

    Returns:
        The JSON document of ``barrierflow retain --json`` (``kept``, ``savepoints``,
        ``deleted``, ``bytes_freed``, ...).

    Raises:
        SpecError: the spec does not load.
        StorageError: the checkpoint store cannot be read or written.
    """
    from barrierflow.ops.retain import retain

    return retain(spec_path, dry_run=dry_run).as_dict()


def reconcile_transactions(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> dict[str, Any]:
    """One reconciliation of the pipeline's sink transactions, as ``barrierflow reconcile SPEC
    [--dry-run] --json``.

    Every unfinished transaction is decided against the latest completed checkpoint T (see
    :mod:`barrierflow.recovery.reconcile`): COMMIT when T covers its epoch; otherwise ABORT when
    the job is not running (its run lease is not held), and NONE (left alone, only reported)
    while it runs, because such a transaction may still be in flight. Unless ``dry_run``, the
    decisions are applied, exactly as planned.

    Returns:
        The JSON document of ``barrierflow reconcile --json``: ``pipeline``,
        ``latest_completed`` (T, or None), ``job_running``, ``decisions`` (``sink``,
        ``transaction_id``, ``checkpoint_id``, ``state``, ``action``, ``reason`` each) and
        ``dry_run``.

    Raises:
        SpecError: the spec does not load.
        SinkError, StorageError: a sink or the checkpoint store failed; decisions applied
            before the failure stay applied; the next run plans the rest anew.
    """
    from barrierflow.ops.reconcile import reconcile

    return reconcile(spec_path, dry_run=dry_run).as_dict()


def report_watermark_skew(spec_path: str | os.PathLike[str], *, last: int | None = None) -> dict[str, Any]:
    """One watermark-skew report of the pipeline, as ``barrierflow skew SPEC [--last N] --json``.

    The report (see :mod:`barrierflow.reports.skew`) is stored in the checkpoint store as
    ``reports/skew-latest.json`` when there is a completed checkpoint.

    Returns:
        The JSON document, when every expectation passed; also when there is no completed
        checkpoint yet (``"checkpoints": []``, ``"message": "no completed checkpoints yet"``).

    Raises:
        SpecError: the spec does not load.
        UserInputError: ``last`` is below 1.
        SkewExpectationError: an expectation failed; the message names each offending
            checkpoint and value, ``summary`` holds the JSON document.
        StorageError: the checkpoint store cannot be read or written.
    """
    from barrierflow.ops.skew import skew

    outcome = skew(spec_path, last=last)
    outcome.raise_for_failures(str(spec_path))
    for name, report in outcome.stages.items():
        log.info("pipeline %r%s: %s", outcome.pipeline, "" if outcome.single_stage else f", stage {name}",
                 report.message)
    return outcome.as_dict()


class BatchReportError(BarrierflowError):
    """The batch job of this DAG run left no report of its own (it did not run, or another run's
    report is stored)."""


#: How many differences the XCom of the stream-vs-batch comparison lists (the stored report lists more).
XCOM_DIFFERENCES = 100


def batch_report(spec_path: str | os.PathLike[str], name: str, *, tag: str, stage: str | None = None
                 ) -> dict[str, Any]:
    """The stored ``rollups`` or ``recompute`` report written by the batch job run with ``--tag
    tag`` (the DAG run's id), its differences cut to :data:`XCOM_DIFFERENCES` for XCom. ``stage``:
    for a pipeline of several stages, the final stage (its report is in the stage's own store).
    A report only under its legacy key (``reports/reconciliation-latest.json``, see
    :func:`barrierflow.ops.batch.stored_report`) is read too; it was written before the rename,
    so it is another run's and its run is named.

    Raises:
        BatchReportError: no report, or one of another run (naming the run and where it is).
    """
    from barrierflow.ops.batch import REPORT_KEYS, stored_report

    found = stored_report(spec_path, name, stage)
    if found is None or found.document.get("tag") != tag:
        store = f"the checkpoint store of stage {stage!r}" if stage else "the checkpoint store"
        where = (f"no report is at {REPORT_KEYS[name]}" if found is None
                 else f"the report of run {found.document.get('tag')!r} is at {found.key}")
        raise BatchReportError(
            f"pipeline {spec_path}: the batch job of run {tag!r} left no {name} report ({where} in {store}): "
            "see the spark-submit task's log for why the job failed")
    document = found.document
    if len(document.get("differences") or []) > XCOM_DIFFERENCES:
        document["differences"] = document["differences"][:XCOM_DIFFERENCES]
    return document


def check_output_quality(spec_path: str | os.PathLike[str], *, epochs: int | None = None,
                         stage: str | None = None) -> dict[str, Any]:
    """One data-quality run, as ``barrierflow quality SPEC [--epochs N] [--stage NAME] --json``
    (``stage``: for a pipeline of several stages, the final stage whose output to validate).

    Returns:
        The JSON document (also stored as ``reports/quality-latest.json``; Data Docs under
        ``reports/quality/``), when every expectation passed or was skipped.

    Raises:
        SpecError, UserInputError, StorageError.
        QualityExpectationError: an expectation failed; the message names each expectation, its
            column(s) and a sample of the bad rows; ``report`` holds the document.
    """
    from barrierflow.ops.quality import quality
    from barrierflow.reports.quality import raise_for_failures

    report = quality(spec_path, epochs=epochs, stage=stage)
    raise_for_failures(report, str(spec_path))
    return report.as_dict()
