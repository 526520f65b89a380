"""The data layer of the Checkpoints page: one pipeline's recent checkpoints, as rows.

A row is a completed checkpoint (its manifest) or a failed one (its ``_failed.json``), with
the verification verdict stored beside it. Values are copied from the manifests unchanged
(times stay timezone-aware UTC, durations in ms, sizes in bytes); the page and the JSON API
only format them. Reports the pipeline's store holds (``reports/skew-latest.json``, and the
data-quality report once it exists) are listed as links; a report that is absent is not
listed.

Row statuses: ``COMPLETED`` (a manifest of the current timeline) and ``FAILED`` (a failure
record and no manifest). Abandoned checkpoints (after a restore) are left out, as
``barrierflow checkpoints list`` leaves them out.

A multi-stage pipeline has no checkpoints at its store's root: its history
(:func:`global_pipeline_history`) has no ``rows`` but ``global_rows``, one per global
checkpoint (completed or failed, with times, total ms and a verdict), each with one
:class:`StageRow` per stage of the spec, in spec order: the stage's mode, alignment ms,
channel-state records and back-edge ranges from its manifest (``alignment``), its sync and
async ms and its own verdict. The global verdict is derived from the stages' stored results
(``barrierflow verify`` stores one per stage checkpoint): ``failed`` if any stage's failed,
``passed`` if every stage's passed, else ``not verified``. A single-stage pipeline's history
and JSON are unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from barrierflow.ui import store_reader
from barrierflow.ui.exceptions import UnknownPipelineError

if TYPE_CHECKING:
    import os

    from barrierflow.spec.models import PipelineSpec
    from barrierflow.spec.stages import StagedPipelineSpec

#: How many of the newest checkpoints a page shows unless asked otherwise.
DEFAULT_LIMIT = 50


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_VERIFIED = "not verified"


@dataclass(frozen=True)
class KnownReport:
    """A report a pipeline's checkpoint store may hold, linked from the page when present.

    ``key``: where the report is written; ``legacy_keys``: where it was written under an
    earlier name, linked (first present one) only when nothing is stored at ``key``."""

    name: str
    title: str
    key: str
    legacy_keys: tuple[str, ...] = ()


#: The reports the page links to when they exist, in display order: the skew report, the
#: data-quality report and its Data Docs (``barrierflow.reports.quality``), the stream-vs-batch
#: comparison (``barrierflow recompute``; written as ``reports/reconciliation-latest.json``
#: before it was named so) and the rollups (``barrierflow.batch``), the latest
#: ``barrierflow chaos`` run (``barrierflow.ops.chaos``). Data Docs pages under
#: ``reports/quality/`` are served by the same report route (relative links work).
KNOWN_REPORTS: tuple[KnownReport, ...] = (
    KnownReport("skew", "Watermark skew report (JSON)", "reports/skew-latest.json"),
    KnownReport("quality", "Data-quality report (JSON)", "reports/quality-latest.json"),
    KnownReport("quality-docs", "Data-quality Data Docs", "reports/quality/index.html"),
    KnownReport("recompute", "Stream-vs-batch comparison (JSON)", "reports/recompute-latest.json",
                legacy_keys=("reports/reconciliation-latest.json",)),
    KnownReport("rollups", "Daily rollups (JSON)", "reports/rollups-latest.json"),
    KnownReport("chaos", "Latest chaos run: kills and checkpoints over time (HTML)", "reports/chaos-latest.html"),
    KnownReport("chaos-json", "Latest chaos run (JSON)", "reports/chaos-latest.json"),
)


def present_reports(store: store_reader.CheckpointStore) -> list[KnownReport]:
    """The :data:`KNOWN_REPORTS` ``store`` holds, in display order, each with ``key`` the object
    to link: its own key when present, else its first present legacy key (then the returned
    report has that key and no ``legacy_keys``); a report with neither is left out."""
    present = []
    for report in KNOWN_REPORTS:
        key = next((k for k in (report.key, *report.legacy_keys) if store_reader.report_exists(store, k)), None)
        if key is not None:
            present.append(report if key == report.key else replace(report, key=key, legacy_keys=()))
    return present


@dataclass(frozen=True)
class VerificationVerdict:
    """The stored verification result of one checkpoint, in one line."""

    verdict: Verdict
    deep: bool = False
    finished: datetime | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "deep": self.deep,
                "finished": self.finished.isoformat() if self.finished else None, "reason": self.reason}


NOT_VERIFIED = VerificationVerdict(Verdict.NOT_VERIFIED)


@dataclass(frozen=True)
class CheckpointRow:
    """One checkpoint as the page shows it; ``None`` where a failed checkpoint has no value."""

    checkpoint_id: int
    status: str
    kind: str
    attempt: int | None
    barrier_batch: int | None
    trigger_time: datetime
    completion_time: datetime | None
    barrier_batch_ms: float | None
    sync_ms: float | None
    async_ms: float | None
    total_ms: float | None
    full_bytes: int | None
    incremental_bytes: int | None
    verification: VerificationVerdict = NOT_VERIFIED
    failure_reason: str | None = None
    failure_message: str | None = None
    failure_time: datetime | None = None

    @property
    def completed(self) -> bool:
        return self.status == "COMPLETED"

    def as_dict(self) -> dict[str, Any]:
        """JSON types only; times ISO 8601 with their UTC offset."""
        def iso(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment else None

        return {
            "checkpoint_id": self.checkpoint_id, "status": self.status, "kind": self.kind, "attempt": self.attempt,
            "barrier_batch": self.barrier_batch, "trigger_time": iso(self.trigger_time),
            "completion_time": iso(self.completion_time), "barrier_batch_ms": self.barrier_batch_ms,
            "sync_ms": self.sync_ms, "async_ms": self.async_ms, "total_ms": self.total_ms,
            "full_bytes": self.full_bytes, "incremental_bytes": self.incremental_bytes,
            "verification": self.verification.as_dict(), "failure_reason": self.failure_reason,
            "failure_message": self.failure_message, "failure_time": iso(self.failure_time),
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


@dataclass(frozen=True)
class ChannelRange:
    """Records ``[start, end)`` of input ``partition`` (``topic:p``) held as channel state;
    ``records`` counts the data records among them."""

    partition: str
    start: int
    end: int
    records: int

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "start": self.start, "end": self.end, "records": self.records}


@dataclass(frozen=True)
class StageRow:
    """One stage's part of a global checkpoint; ``None`` where the stage has no value (no
    manifest ``n``, or, for ``mode``/``alignment_ms``, no channel inputs).

    ``present``: the stage's manifest ``n`` exists and parses. ``channel_state_records``
    counts data records held as channel state (0 for a stage without channel inputs);
    ``back_edge_ranges`` are the channel-state ranges on channels closing a cycle."""

    stage: str
    present: bool
    mode: str | None
    barrier_batch: int | None
    alignment_ms: float | None
    sync_ms: float | None
    async_ms: float | None
    channel_state_records: int | None
    back_edge_ranges: list[ChannelRange] = field(default_factory=list)
    verification: VerificationVerdict = NOT_VERIFIED

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "present": self.present, "mode": self.mode, "barrier_batch": self.barrier_batch,
                "alignment_ms": self.alignment_ms, "sync_ms": self.sync_ms, "async_ms": self.async_ms,
                "channel_state_records": self.channel_state_records,
                "back_edge_ranges": [r.as_dict() for r in self.back_edge_ranges],
                "verification": self.verification.as_dict()}


@dataclass(frozen=True)
class GlobalCheckpointRow:
    """One global checkpoint of a multi-stage pipeline and its stages' rows (spec order)."""

    checkpoint_id: int
    status: str
    attempt: int | None
    trigger_time: datetime | None
    completion_time: datetime | None
    total_ms: float | None
    stages: list[StageRow]
    verification: VerificationVerdict = NOT_VERIFIED
    failure_reason: str | None = None
    failure_message: str | None = None
    failure_time: datetime | None = None

    @property
    def completed(self) -> bool:
        return self.status == "COMPLETED"

    def as_dict(self) -> dict[str, Any]:
        """JSON types only; times ISO 8601 with their UTC offset."""
        return {
            "checkpoint_id": self.checkpoint_id, "status": self.status, "attempt": self.attempt,
            "trigger_time": _iso(self.trigger_time), "completion_time": _iso(self.completion_time),
            "total_ms": self.total_ms, "verification": self.verification.as_dict(),
            "failure_reason": self.failure_reason, "failure_message": self.failure_message,
            "failure_time": _iso(self.failure_time), "stages": [s.as_dict() for s in self.stages],
        }


@dataclass(frozen=True)
class PipelineHistory:
    """What the page shows for one pipeline: rows newest first, and the reports present.

    A multi-stage pipeline has ``stages`` (their names) and ``global_rows`` instead of ``rows``;
    its totals count global checkpoints."""

    pipeline: str
    storage: str
    attempt: int
    rows: list[CheckpointRow]
    reports: list[KnownReport] = field(default_factory=list)
    total_completed: int = 0
    total_failed: int = 0
    stages: tuple[str, ...] = ()
    global_rows: list[GlobalCheckpointRow] = field(default_factory=list)

    @property
    def multi_stage(self) -> bool:
        return bool(self.stages)

    @property
    def shown(self) -> int:
        """How many checkpoints (global ones for several stages) the history holds."""
        return len(self.global_rows) if self.multi_stage else len(self.rows)

    def as_dict(self) -> dict[str, Any]:
        """The JSON API's document; a single-stage pipeline's has no ``stages`` nor ``global_checkpoints``."""
        data = {
            "pipeline": self.pipeline, "storage": self.storage, "attempt": self.attempt,
            "total_completed": self.total_completed, "total_failed": self.total_failed,
            "checkpoints": [row.as_dict() for row in self.rows],
            "reports": [{"name": r.name, "title": r.title, "key": r.key} for r in self.reports],
        }
        if self.multi_stage:
            data |= {"stages": list(self.stages), "global_checkpoints": [g.as_dict() for g in self.global_rows]}
        return data


def verdict_of(report: store_reader.VerificationReport | None) -> VerificationVerdict:
    if report is None:
        return NOT_VERIFIED
    return VerificationVerdict(Verdict.PASSED if report.passed else Verdict.FAILED, deep=report.deep,
                               finished=report.finished, reason=report.reason())


def completed_row(manifest: store_reader.Manifest, verification: VerificationVerdict) -> CheckpointRow:
    return CheckpointRow(
        checkpoint_id=manifest.checkpoint_id, status="COMPLETED", kind=str(manifest.kind),
        attempt=manifest.attempt, barrier_batch=manifest.spark_batch_id, trigger_time=manifest.trigger_time,
        completion_time=manifest.completion_time, barrier_batch_ms=store_reader.barrier_batch_ms(manifest),
        sync_ms=manifest.sync_ms, async_ms=manifest.async_ms, total_ms=manifest.total_ms,
        full_bytes=manifest.full_bytes, incremental_bytes=manifest.incremental_bytes, verification=verification)


def failed_row(record: store_reader.FailureRecord) -> CheckpointRow:
    return CheckpointRow(
        checkpoint_id=record.checkpoint_id, status="FAILED", kind="checkpoint", attempt=None,
        barrier_batch=record.spark_batch_id, trigger_time=record.trigger_time, completion_time=None,
        barrier_batch_ms=None, sync_ms=None, async_ms=None, total_ms=None, full_bytes=None,
        incremental_bytes=None, failure_reason=str(record.reason),
        failure_message=f"{record.reason.explanation}: {record.message}", failure_time=record.failure_time)


def pipeline_history(spec: PipelineSpec, store: store_reader.CheckpointStore | None = None, *,
                     limit: int = DEFAULT_LIMIT) -> PipelineHistory:
    """The newest ``limit`` checkpoints of ``spec`` (completed and failed), newest first.

    Reads the checkpoint store only (no Spark, no source). ``store`` defaults to the spec's.

    Raises:
        ValueError: ``limit`` is below 1.
        StorageError: the checkpoint store cannot be read.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    store = store or store_reader.open_checkpoint_store(spec)
    manifests = store_reader.read_manifests(store)
    completed_ids = {m.checkpoint_id for m in manifests}
    failures = [f for f in store_reader.read_failures(store) if f.checkpoint_id not in completed_ids]
    newest_ids = sorted(completed_ids | {f.checkpoint_id for f in failures}, reverse=True)[:limit]
    shown = set(newest_ids)
    rows = [completed_row(m, verdict_of(store_reader.read_verification(store, m.checkpoint_id)))
            for m in manifests if m.checkpoint_id in shown]
    rows += [failed_row(f) for f in failures if f.checkpoint_id in shown]
    rows.sort(key=lambda row: row.checkpoint_id, reverse=True)
    reports = present_reports(store)
    return PipelineHistory(pipeline=spec.name, storage=store.uri, attempt=store_reader.read_attempt(store),
                           rows=rows, reports=reports, total_completed=len(manifests), total_failed=len(failures))


def combined_verdict(verdicts: list[VerificationVerdict]) -> VerificationVerdict:
    """The verdict of a global checkpoint from its stages': failed if any failed (the reasons
    named by stage order), passed if every one passed (deep only if every one was), else not
    verified (no stage, or one stage without a stored result)."""
    failed = [v for v in verdicts if v.verdict is Verdict.FAILED]
    finished = max((v.finished for v in verdicts if v.finished), default=None)
    if failed:
        return VerificationVerdict(Verdict.FAILED, deep=all(v.deep for v in failed), finished=finished,
                                   reason="; ".join(v.reason for v in failed))
    if verdicts and all(v.verdict is Verdict.PASSED for v in verdicts):
        return VerificationVerdict(Verdict.PASSED, deep=all(v.deep for v in verdicts), finished=finished,
                                   reason="passed")
    return NOT_VERIFIED


def stage_row(part: store_reader.StagePart) -> StageRow:
    """A stage's row from its part: values from its manifest, else what the global manifest recorded."""
    manifest, snapshot = part.manifest, part.snapshot
    verification = verdict_of(part.verification)
    if manifest is not None:
        alignment = manifest.alignment
        return StageRow(
            stage=part.stage, present=True, mode=alignment.mode if alignment else None,
            barrier_batch=manifest.spark_batch_id, alignment_ms=alignment.alignment_ms if alignment else None,
            sync_ms=manifest.sync_ms, async_ms=manifest.async_ms,
            channel_state_records=alignment.channel_state_records if alignment else 0,
            back_edge_ranges=[ChannelRange(e.partition, e.start, e.end, e.records) for e in part.back_edge_ranges],
            verification=verification)
    if snapshot is not None:
        return StageRow(stage=part.stage, present=False, mode=snapshot.mode, barrier_batch=snapshot.spark_batch_id,
                        alignment_ms=snapshot.alignment_ms if snapshot.mode else None, sync_ms=snapshot.sync_ms,
                        async_ms=snapshot.async_ms, channel_state_records=snapshot.channel_state_records,
                        verification=verification)
    return StageRow(stage=part.stage, present=False, mode=None, barrier_batch=None, alignment_ms=None, sync_ms=None,
                    async_ms=None, channel_state_records=None, verification=verification)


def global_row(entry: store_reader.GlobalCheckpointEntry) -> GlobalCheckpointRow:
    stages = [stage_row(part) for part in entry.stages]
    verdict = combined_verdict([s.verification for s in stages])
    if entry.manifest is not None:
        m = entry.manifest
        return GlobalCheckpointRow(checkpoint_id=m.checkpoint_id, status="COMPLETED", attempt=m.attempt,
                                   trigger_time=m.trigger_time, completion_time=m.completion_time,
                                   total_ms=m.total_ms, stages=stages, verification=verdict)
    failure = entry.failure
    return GlobalCheckpointRow(
        checkpoint_id=entry.checkpoint_id, status="FAILED", attempt=None, trigger_time=entry.trigger_time,
        completion_time=None, total_ms=None, stages=stages, verification=verdict,
        failure_reason=failure.reason if failure else None, failure_message=failure.message if failure else None,
        failure_time=failure.failure_time if failure else None)


def global_pipeline_history(spec_path: str | os.PathLike[str], spec: StagedPipelineSpec,
                            store: store_reader.CheckpointStore | None = None, *,
                            limit: int = DEFAULT_LIMIT) -> PipelineHistory:
    """The newest ``limit`` global checkpoints of the multi-stage ``spec`` (loaded from
    ``spec_path``), completed and failed, newest first, each with one row per stage.

    Reads the checkpoint store only (no Spark, no broker). ``store``: the pipeline-level store
    at the root of ``checkpoint.storage`` (default: the spec's), where the reports are looked for.

    Raises:
        ValueError: ``limit`` is below 1.
        CheckpointCorruptError: a global record does not parse. StorageError: the store cannot be read.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    store = store or store_reader.open_checkpoint_store(spec)  # type: ignore[arg-type]
    history = store_reader.read_global_history(spec_path, limit)
    reports = present_reports(store)
    return PipelineHistory(pipeline=history.pipeline, storage=history.storage, attempt=history.attempt, rows=[],
                           reports=reports, total_completed=history.total_completed,
                           total_failed=history.total_failed, stages=history.stages,
                           global_rows=[global_row(e) for e in history.checkpoints])


@dataclass(frozen=True)
class PipelineEntry:
    """One spec of the pipelines folder: loadable (``spec``) or not (``error``)."""

    name: str
    path: str
    spec: PipelineSpec | StagedPipelineSpec | None
    error: str | None

    @property
    def multi_stage(self) -> bool:
        """Whether the spec loaded and is a pipeline of several stages."""
        return self.spec is not None and hasattr(self.spec, "stages")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "spec_file": self.path, "error": self.error,
                "storage": self.spec.checkpoint.storage if self.spec else None}


def list_pipelines(folder: str) -> list[PipelineEntry]:
    """Every spec in ``folder``, as the DAG file discovers them; never raises for a bad spec."""
    return [PipelineEntry(name=p.name, path=str(p.path), spec=p.spec, error=p.error)
            for p in store_reader.find_pipelines(folder)]


def find_entry(folder: str, name: str) -> PipelineEntry:
    """The loadable spec named ``name`` in ``folder`` with its file (single- or multi-stage).

    Raises:
        UnknownPipelineError: no loadable spec has that name.
    """
    entries = list_pipelines(folder)
    for entry in entries:
        if entry.name == name and entry.spec is not None:
            return entry
    raise UnknownPipelineError(name, [e.name for e in entries if e.spec is not None], folder)


def find_pipeline(folder: str, name: str) -> PipelineSpec:
    """The loaded spec named ``name`` in ``folder`` (a multi-stage one too: see :func:`find_entry`).

    Raises:
        UnknownPipelineError: no loadable spec has that name.
    """
    return find_entry(folder, name).spec  # type: ignore[return-value]


def history_of(entry: PipelineEntry, store: store_reader.CheckpointStore | None = None, *,
               limit: int = DEFAULT_LIMIT) -> PipelineHistory:
    """The history of a loadable spec: :func:`global_pipeline_history` for several stages,
    else :func:`pipeline_history`. Raises ValueError for an entry whose spec did not load."""
    if entry.spec is None:
        raise ValueError(f"spec {entry.path} did not load: {entry.error}")
    if entry.multi_stage:
        return global_pipeline_history(entry.path, entry.spec, store, limit=limit)  # type: ignore[arg-type]
    return pipeline_history(entry.spec, store, limit=limit)  # type: ignore[arg-type]
