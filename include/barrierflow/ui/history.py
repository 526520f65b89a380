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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from barrierflow.ui import store_reader
from barrierflow.ui.exceptions import UnknownPipelineError

if TYPE_CHECKING:
    from barrierflow.spec.models import PipelineSpec

#: How many of the newest checkpoints a page shows unless asked otherwise.
DEFAULT_LIMIT = 50


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_VERIFIED = "not verified"


@dataclass(frozen=True)
class KnownReport:
    """A report a pipeline's checkpoint store may hold, linked from the page when present."""

    name: str
    title: str
    key: str


#: The reports the page links to when they exist, in display order: the skew report, the
#: data-quality report and its Data Docs (``barrierflow.reports.quality``), the stream-vs-batch
#: reconciliation and the rollups (``barrierflow.batch``). Data Docs pages under
#: ``reports/quality/`` are served by the same report route (relative links work).
KNOWN_REPORTS: tuple[KnownReport, ...] = (
    KnownReport("skew", "Watermark skew report (JSON)", "reports/skew-latest.json"),
    KnownReport("quality", "Data-quality report (JSON)", "reports/quality-latest.json"),
    KnownReport("quality-docs", "Data-quality Data Docs", "reports/quality/index.html"),
    KnownReport("reconciliation", "Stream-vs-batch reconciliation (JSON)", "reports/reconciliation-latest.json"),
    KnownReport("rollups", "Daily rollups (JSON)", "reports/rollups-latest.json"),
)


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


@dataclass(frozen=True)
class PipelineHistory:
    """What the page shows for one pipeline: rows newest first, and the reports present."""

    pipeline: str
    storage: str
    attempt: int
    rows: list[CheckpointRow]
    reports: list[KnownReport] = field(default_factory=list)
    total_completed: int = 0
    total_failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline, "storage": self.storage, "attempt": self.attempt,
            "total_completed": self.total_completed, "total_failed": self.total_failed,
            "checkpoints": [row.as_dict() for row in self.rows],
            "reports": [{"name": r.name, "title": r.title, "key": r.key} for r in self.reports],
        }


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
    reports = [r for r in KNOWN_REPORTS if store_reader.report_exists(store, r.key)]
    return PipelineHistory(pipeline=spec.name, storage=store.uri, attempt=store_reader.read_attempt(store),
                           rows=rows, reports=reports, total_completed=len(manifests), total_failed=len(failures))


@dataclass(frozen=True)
class PipelineEntry:
    """One spec of the pipelines folder: loadable (``spec``) or not (``error``)."""

    name: str
    path: str
    spec: PipelineSpec | None
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "spec_file": self.path, "error": self.error,
                "storage": self.spec.checkpoint.storage if self.spec else None}


def list_pipelines(folder: str) -> list[PipelineEntry]:
    """Every spec in ``folder``, as the DAG file discovers them; never raises for a bad spec."""
    return [PipelineEntry(name=p.name, path=str(p.path), spec=p.spec, error=p.error)
            for p in store_reader.find_pipelines(folder)]


def find_pipeline(folder: str, name: str) -> PipelineSpec:
    """The loaded spec named ``name`` in ``folder``.

    Raises:
        UnknownPipelineError: no loadable spec has that name.
    """
    entries = list_pipelines(folder)
    for entry in entries:
        if entry.name == name and entry.spec is not None:
            return entry.spec
    raise UnknownPipelineError(name, [e.name for e in entries if e.spec is not None], folder)
