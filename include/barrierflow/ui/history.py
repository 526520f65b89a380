"""The data layer of the Checkpoints page: one pipeline's recent cuts, as rows.

Every pipeline has the same history, whatever its shape (a single-stage pipeline is a graph of
one stage, whose checkpoints are its cuts): one :class:`CutRow` per cut (its checkpoints; of
several stages: its global checkpoints), completed or failed, with times, total ms and a
verdict, each with one :class:`StageRow` per stage of the spec, in spec order: the stage's
kind, barrier batch, barrier batch ms, sync and async ms and bytes from its manifest, its mode,
alignment ms, channel-state records and back-edge ranges (``alignment``), each sink's freshness
(commit time minus the oldest source arrival the commit made visible, stored beside the
checkpoint by the run), and its own verdict;
a completed cut of a pipeline writing Iceberg or Delta tables lists each table as the cut
records it (``tables``: snapshot id or version, or "not committed at this checkpoint").
The cut's verdict is derived from the stages' stored results (``barrierflow verify`` stores one
per stage checkpoint): ``failed`` if any stage's failed, ``passed`` if every stage's passed,
else ``not verified``. Values are copied from the manifests unchanged (times stay
timezone-aware UTC, durations in ms, sizes in bytes); the page and the JSON API only format
them. Reports the pipeline's store holds (``reports/skew-latest.json``, and the data-quality
report once it exists) are listed as links; a report that is absent is not listed. The
pipeline's savepoints (every one, oldest first) and its recorded upgrades (every one, newest
first, the current unfinished one first: ``_upgrade.json`` and the history kept under
``_upgrades/``; a record that does not parse is reported in its entry, not raised, and the others
are shown) come with the history, read the same way for every shape.

Cut statuses: ``COMPLETED`` (a manifest of the current timeline) and ``FAILED`` (a failure
record and no manifest). Abandoned cuts (after a restore) are left out, as ``barrierflow
checkpoints list`` marks them.
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

    from barrierflow.spec.models import StageSpec
    from barrierflow.spec.stages import PipelineSpec

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
    """One stage's part of a cut; ``None`` where the stage has no value (no manifest ``n``,
    or, for ``mode``/``alignment_ms``, no channel inputs).

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
    kind: str | None = None
    barrier_batch_ms: float | None = None
    full_bytes: int | None = None
    incremental_bytes: int | None = None
    failure: str | None = None
    #: each sink's freshness of the checkpoint in seconds: commit time minus the oldest source
    #: arrival it made visible (empty: none stored)
    freshness: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "present": self.present, "kind": self.kind, "mode": self.mode,
                "barrier_batch": self.barrier_batch, "barrier_batch_ms": self.barrier_batch_ms,
                "alignment_ms": self.alignment_ms, "sync_ms": self.sync_ms, "async_ms": self.async_ms,
                "full_bytes": self.full_bytes, "incremental_bytes": self.incremental_bytes,
                "channel_state_records": self.channel_state_records,
                "back_edge_ranges": [r.as_dict() for r in self.back_edge_ranges],
                "verification": self.verification.as_dict(), "failure": self.failure,
                "freshness_seconds": dict(self.freshness)}


@dataclass(frozen=True)
class CutRow:
    """One cut of a pipeline (a checkpoint; of several stages: a global checkpoint) and its
    stages' rows (spec order)."""

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
    tables: list[store_reader.CutTable] = field(default_factory=list)

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
            "failure_time": _iso(self.failure_time), "stages": {s.stage: s.as_dict() for s in self.stages},
            "tables": [t.as_dict() for t in self.tables],
        }


@dataclass(frozen=True)
class PipelineHistory:
    """What the page shows for one pipeline: its cuts newest first (``noun`` names them),
    its stages' names, the reports present and the totals of cuts."""

    pipeline: str
    storage: str
    attempt: int
    noun: str
    stages: tuple[str, ...]
    rows: list[CutRow]
    reports: list[KnownReport] = field(default_factory=list)
    total_completed: int = 0
    total_failed: int = 0
    savepoints: list[store_reader.SavepointEntry] = field(default_factory=list)
    upgrades: list[store_reader.RecordedUpgrade] = field(default_factory=list)

    @property
    def shown(self) -> int:
        """How many cuts the history holds."""
        return len(self.rows)

    def as_dict(self) -> dict[str, Any]:
        """The JSON API's document, one shape for every pipeline: ``pipeline``, ``storage``,
        ``attempt``, ``noun``, the totals, ``stages`` (names, spec order), ``checkpoints`` (each
        cut with its stages' rows under ``stages``, by name), ``reports``, ``savepoints`` (oldest
        first), ``upgrades`` (every readable recorded upgrade, newest first, the current
        unfinished one first: its record's fields with the derived ``verdict``, ``key``, the
        object it was read from, and ``in_progress``) and ``upgrade_problems`` (``{"key",
        "problem"}`` of each record that could not be read)."""
        return {
            "pipeline": self.pipeline, "storage": self.storage, "attempt": self.attempt, "noun": self.noun,
            "total_completed": self.total_completed, "total_failed": self.total_failed,
            "stages": list(self.stages), "checkpoints": [row.as_dict() for row in self.rows],
            "reports": [{"name": r.name, "title": r.title, "key": r.key} for r in self.reports],
            "savepoints": [s.as_dict() for s in self.savepoints],
            "upgrades": [u.as_dict() for u in self.upgrades if u.record is not None],
            "upgrade_problems": [{"key": u.key, "problem": u.problem} for u in self.upgrades if u.record is None],
        }


def verdict_of(report: store_reader.VerificationReport | None) -> VerificationVerdict:
    if report is None:
        return NOT_VERIFIED
    return VerificationVerdict(Verdict.PASSED if report.passed else Verdict.FAILED, deep=report.deep,
                               finished=report.finished, reason=report.reason())


def combined_verdict(verdicts: list[VerificationVerdict]) -> VerificationVerdict:
    """The verdict of a cut from its stages': failed if any failed (the reasons
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
    """A stage's row from its part: values from its manifest, else what the global manifest
    recorded, else what its own failure record says (its barrier batch, why it failed)."""
    manifest, snapshot, record = part.manifest, part.snapshot, part.failure
    verification = verdict_of(part.verification)
    failure = (f"{record.reason.value}: {record.reason.explanation}: {record.message}" if record is not None else None)
    if manifest is not None:
        alignment = manifest.alignment
        return StageRow(
            stage=part.stage, present=True, mode=alignment.mode if alignment else None,
            barrier_batch=manifest.spark_batch_id, alignment_ms=alignment.alignment_ms if alignment else None,
            sync_ms=manifest.sync_ms, async_ms=manifest.async_ms,
            channel_state_records=alignment.channel_state_records if alignment else 0,
            back_edge_ranges=[ChannelRange(e.partition, e.start, e.end, e.records) for e in part.back_edge_ranges],
            verification=verification, kind=str(manifest.kind),
            barrier_batch_ms=store_reader.barrier_batch_ms(manifest), full_bytes=manifest.full_bytes,
            incremental_bytes=manifest.incremental_bytes, freshness=dict(part.freshness))
    if snapshot is not None:
        return StageRow(stage=part.stage, present=False, mode=snapshot.mode, barrier_batch=snapshot.spark_batch_id,
                        alignment_ms=snapshot.alignment_ms if snapshot.mode else None, sync_ms=snapshot.sync_ms,
                        async_ms=snapshot.async_ms, channel_state_records=snapshot.channel_state_records,
                        verification=verification, failure=failure)
    return StageRow(stage=part.stage, present=False, mode=None,
                    barrier_batch=record.spark_batch_id if record is not None else None, alignment_ms=None,
                    sync_ms=None, async_ms=None, channel_state_records=None, verification=verification,
                    failure=failure)


def cut_row(entry: store_reader.GlobalCheckpointEntry) -> CutRow:
    stages = [stage_row(part) for part in entry.stages]
    verdict = combined_verdict([s.verification for s in stages])
    if entry.manifest is not None:
        m = entry.manifest
        return CutRow(checkpoint_id=m.checkpoint_id, status="COMPLETED", attempt=m.attempt,
                                   trigger_time=m.trigger_time, completion_time=m.completion_time,
                                   total_ms=m.total_ms, stages=stages, verification=verdict, tables=entry.tables)
    failure = entry.failure
    return CutRow(
        checkpoint_id=entry.checkpoint_id, status="FAILED", attempt=None, trigger_time=entry.trigger_time,
        completion_time=None, total_ms=None, stages=stages, verification=verdict,
        failure_reason=failure.reason if failure else None, failure_message=failure.message if failure else None,
        failure_time=failure.failure_time if failure else None)


def cut_history(spec_path: str | os.PathLike[str], spec: PipelineSpec,
                store: store_reader.CheckpointStore | None = None, *, limit: int = DEFAULT_LIMIT) -> PipelineHistory:
    """The newest ``limit`` cuts of ``spec`` (loaded from ``spec_path``), completed and
    failed, newest first, each with one row per stage.

    Reads the checkpoint store only (no Spark, no broker). ``store``: the pipeline-level store
    at the root of ``checkpoint.storage`` (default: the spec's), where the reports are looked for.

    Raises:
        ValueError: ``limit`` is below 1.
        CheckpointCorruptError: a global record does not parse. StorageError: the store cannot be read.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    store = store or store_reader.open_checkpoint_store(spec)
    history = store_reader.read_global_history(spec_path, limit)
    return PipelineHistory(pipeline=history.pipeline, storage=history.storage, attempt=history.attempt,
                           noun=history.noun, stages=history.stages, rows=[cut_row(e) for e in history.checkpoints],
                           reports=present_reports(store), total_completed=history.total_completed,
                           total_failed=history.total_failed, savepoints=store_reader.read_savepoints(spec_path),
                           upgrades=store_reader.read_upgrades(store))


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


def find_pipeline(folder: str, name: str) -> StageSpec:
    """The loaded spec named ``name`` in ``folder`` (a multi-stage one too: see :func:`find_entry`).

    Raises:
        UnknownPipelineError: no loadable spec has that name.
    """
    return find_entry(folder, name).spec  # type: ignore[return-value]


def history_of(entry: PipelineEntry, store: store_reader.CheckpointStore | None = None, *,
               limit: int = DEFAULT_LIMIT) -> PipelineHistory:
    """The history of a loadable spec (:func:`cut_history`). Raises ValueError for an entry
    whose spec did not load."""
    if entry.spec is None:
        raise ValueError(f"spec {entry.path} did not load: {entry.error}")
    return cut_history(entry.path, entry.spec, store, limit=limit)
