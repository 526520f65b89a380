"""The watermark-skew report: event-time progress per source partition over the pipeline's
completed checkpoints (the current timeline: abandoned checkpoints are left out).

Read from the manifests only (no Spark, no source access). Per checkpoint ``c`` and source
partition ``p`` (``<source>/<partition>``):

* ``max_event_time``: newest event time up to the barrier (manifest ``max_event_time``);
  ``None`` = unknown (see ``sources/event_times.py`` for Kafka). Unknown partitions are listed per checkpoint
  and in the report, never silently dropped.
* ``offset``: the barrier offset; ``advanced``: records since the previous completed checkpoint
  of the timeline (offset difference; ``None`` for the first checkpoint, or when ``p`` is new).
* ``lag_seconds``: ``completion_time(c) - max_event_time(c, p)`` (``None`` when unknown).

Per checkpoint: ``skew_seconds`` = newest minus oldest *known* partition max event time
(``None`` with fewer than two known partitions), ``max_lag_seconds`` = the largest partition
lag, ``barrier_batch_ms`` (the barrier's time in the stage, from the manifest).

With ``event_time`` in the spec, the manifest's ``event_time`` section adds per partition its
``watermark`` (max event time minus the delay), ``idle`` (``event_time.idle_timeout``),
``paused`` (by watermark alignment in the barrier batch), ``pauses`` and ``paused_seconds``
(since the source reader started), and per checkpoint ``rows_dropped_by_watermark`` (Spark's
numRowsDroppedByWatermark over the epoch's batches; ``None`` = unknown or no event time).

Idle partitions: partitions whose offset did not advance (``advanced == 0``) in each of the
newest ``reports.idle_checkpoints`` (K, default 3) checkpoints of the whole timeline, and those
the newest checkpoint's manifest marks idle.

Expectations (Great Expectations, run by :func:`barrierflow.verification.deep.run_suite` on the
per-checkpoint table): ``skew_seconds <= reports.max_skew`` and ``max_lag_seconds <=
reports.max_lag``, and ``rows_dropped_by_watermark <= reports.max_late_rows`` (``auto``: 0 when
``event_time.alignment`` is on, else not checked); a limit that is ``null`` is not checked,
unknown values are not checked.
A failed expectation names every offending checkpoint and its value.

The JSON document (``barrierflow skew SPEC --json``, format ``barrierflow-skew-report``,
version 1) is also stored in the checkpoint store as ``reports/skew-latest.json`` (replaced by
every run that found a completed checkpoint)::

    {"format": "barrierflow-skew-report", "format_version": 2, "pipeline": "demo",
     "storage": "file://...", "generated": "2026-...+00:00", "passed": true, "message": "...",
     "settings": {"max_skew_seconds": 60.0, "max_lag_seconds": null, "idle_checkpoints": 3, "last": null,
                  "max_late_rows": 0},
     "checkpoints": [{"checkpoint_id": 7, "completion_time": "...", "barrier_batch_ms": 3.2,
                      "skew_seconds": 1.0, "max_lag_seconds": 12.5, "unknown_event_time": [],
                      "partitions": [{"partition": "events/0", "source": "events", "offset": 100,
                                      "advanced": 10, "max_event_time": "...", "lag_seconds": 12.5,
                                      "watermark": "...", "idle": false, "paused": false, "pauses": 0,
                                      "paused_seconds": 0.0}],
                      "rows_dropped_by_watermark": 0}],
     "idle_partitions": [], "unknown_event_time_partitions": [],
     "checks": [{"name": "skew", "status": "passed", "passed": true, "message": "...", "file": null}],
     "failures": []}
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.spec.models import ReportsSpec
from barrierflow.verification.report import CheckResult

if TYPE_CHECKING:
    import pandas as pd

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import StageSpec

SKEW_FORMAT = "barrierflow-skew-report"
SKEW_VERSION = 2  # 2: "alignment_ms" renamed "barrier_batch_ms"
#: Where the newest report is stored, relative to the checkpoint store's root.
SKEW_REPORT_KEY = "reports/skew-latest.json"
NO_CHECKPOINTS = "no completed checkpoints yet"
_SUITE_FILE = "reports.skew (spec)"


class SkewExpectationError(BarrierflowError):
    """The skew report's expectations failed (not bad input: the CLI exits 1).

    Attributes:
        summary: the report's JSON document (:meth:`SkewReport.as_dict`).
        failures: the messages of the failed checks, each naming checkpoint and value.
    """

    def __init__(self, summary: dict[str, Any], failures: list[str], detail: str) -> None:
        self.summary = summary
        self.failures = failures
        super().__init__(detail)


@dataclass(frozen=True)
class PartitionPoint:
    """One source partition at one checkpoint's barrier (see the module docstring)."""

    source: str
    partition: str
    offset: int | None
    advanced: int | None
    max_event_time: datetime | None
    lag_seconds: float | None
    watermark: datetime | None = None
    idle: bool = False
    paused: bool = False
    pauses: int = 0
    paused_seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.source}/{self.partition}"

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.name, "source": self.source, "offset": self.offset, "advanced": self.advanced,
                "max_event_time": self.max_event_time.isoformat() if self.max_event_time else None,
                "lag_seconds": self.lag_seconds,
                "watermark": self.watermark.isoformat() if self.watermark else None, "idle": self.idle,
                "paused": self.paused, "pauses": self.pauses, "paused_seconds": self.paused_seconds}


@dataclass(frozen=True)
class CheckpointSkew:
    """Event-time skew and lag of one completed checkpoint."""

    checkpoint_id: int
    completion_time: datetime
    barrier_batch_ms: float
    partitions: list[PartitionPoint]
    rows_dropped_by_watermark: int | None = None

    @property
    def unknown_event_time(self) -> list[str]:
        """Partitions whose max event time is unknown at this checkpoint."""
        return [p.name for p in self.partitions if p.max_event_time is None]

    @property
    def skew_seconds(self) -> float | None:
        known = [p.max_event_time for p in self.partitions if p.max_event_time is not None]
        return (max(known) - min(known)).total_seconds() if len(known) >= 2 else None

    @property
    def max_lag_seconds(self) -> float | None:
        lags = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(lags) if lags else None

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "completion_time": self.completion_time.isoformat(),
                "barrier_batch_ms": self.barrier_batch_ms, "skew_seconds": self.skew_seconds,
                "max_lag_seconds": self.max_lag_seconds, "unknown_event_time": self.unknown_event_time,
                "partitions": [p.as_dict() for p in self.partitions],
                "rows_dropped_by_watermark": self.rows_dropped_by_watermark}


@dataclass(frozen=True)
class SkewReport:
    """The whole report: ``checkpoints`` (oldest first) are the ones reported (``--last N``);
    ``idle_partitions`` looks at the newest ``settings.idle_checkpoints`` of the whole timeline."""

    pipeline: str
    storage: str
    generated: datetime
    settings: ReportsSpec
    last: int | None
    checkpoints: list[CheckpointSkew]
    idle_partitions: list[str]
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    @property
    def unknown_event_time_partitions(self) -> list[str]:
        """Partitions whose event time is unknown at one or more reported checkpoints."""
        return sorted({name for c in self.checkpoints for name in c.unknown_event_time})

    @property
    def message(self) -> str:
        """One line for people: the outcome, or :data:`NO_CHECKPOINTS`."""
        if not self.checkpoints:
            return NO_CHECKPOINTS
        first, last = self.checkpoints[0].checkpoint_id, self.checkpoints[-1].checkpoint_id
        skews = [c.skew_seconds for c in self.checkpoints if c.skew_seconds is not None]
        text = (f"{len(self.checkpoints)} checkpoints ({first}..{last}); max skew "
                + (f"{max(skews):g}s" if skews else "unknown")
                + f"; idle partitions: {', '.join(self.idle_partitions) or 'none'}"
                + f"; unknown event time: {', '.join(self.unknown_event_time_partitions) or 'none'}")
        if self.failures:
            text += "; FAILED: " + "; ".join(c.message for c in self.failures)
        return text

    def as_dict(self) -> dict[str, Any]:
        """The JSON document (module docstring); only JSON types, no NaN."""
        return {
            "format": SKEW_FORMAT, "format_version": SKEW_VERSION, "pipeline": self.pipeline,
            "storage": self.storage, "generated": self.generated.isoformat(), "passed": self.passed,
            "message": self.message,
            "settings": {"max_skew_seconds": self.settings.max_skew, "max_lag_seconds": self.settings.max_lag,
                         "idle_checkpoints": self.settings.idle_checkpoints, "last": self.last,
                         "max_late_rows": self.settings.max_late_rows},
            "checkpoints": [c.as_dict() for c in self.checkpoints],
            "idle_partitions": self.idle_partitions,
            "unknown_event_time_partitions": self.unknown_event_time_partitions,
            "checks": [c.model_dump(mode="json") for c in self.checks],
            "failures": [c.message for c in self.failures],
        }


def checkpoint_rows(manifests: list[Manifest]) -> list[CheckpointSkew]:
    """Per-checkpoint, per-partition points of ``manifests`` (ascending ids, one timeline):
    offsets advanced against the previous manifest of the list."""
    out: list[CheckpointSkew] = []
    previous: dict[tuple[str, str], int] = {}
    for m in manifests:
        points = []
        for source in sorted(m.barrier_offsets):
            times = m.max_event_time.get(source, {})
            marks = m.event_time.partitions.get(source, {}) if m.event_time else {}
            for partition in sorted(m.barrier_offsets[source], key=_partition_order):
                offset = m.barrier_offsets[source][partition]
                before = previous.get((source, partition))
                event_time = times.get(partition)
                lag = (m.completion_time - event_time).total_seconds() if event_time is not None else None
                mark = marks.get(partition)
                points.append(PartitionPoint(
                    source, partition, offset, None if before is None else offset - before, event_time, lag,
                    *((mark.watermark, mark.idle, mark.paused, mark.pauses, mark.paused_seconds) if mark else ())))
        # A partition with an event time but no offset is still reported (its event time known, offset not).
        for source, times in sorted(m.max_event_time.items()):
            for partition in sorted(set(times) - set(m.barrier_offsets.get(source, {})), key=_partition_order):
                event_time = times[partition]
                lag = (m.completion_time - event_time).total_seconds() if event_time is not None else None
                points.append(PartitionPoint(source, partition, None, None, event_time, lag))
        previous = {(p.source, p.partition): p.offset for p in points if p.offset is not None}
        out.append(CheckpointSkew(m.checkpoint_id, m.completion_time, m.barrier_batch_ms, points,
                                  m.event_time.rows_dropped_by_watermark if m.event_time else None))
    return out


def idle_partitions(rows: list[CheckpointSkew], idle_checkpoints: int) -> list[str]:
    """Partitions with ``advanced == 0`` in each of the newest ``idle_checkpoints`` rows (none
    when there are fewer rows, or a partition's advance is unknown in one of them), and the
    partitions the newest row marks idle (``event_time.idle_timeout``)."""
    if idle_checkpoints < 1:
        raise UserInputError(f"idle_checkpoints must be at least 1, got {idle_checkpoints}")
    marked = {p.name for p in rows[-1].partitions if p.idle} if rows else set()
    if len(rows) < idle_checkpoints:
        return sorted(marked, key=_name_order)
    window = rows[-idle_checkpoints:]
    advanced = [{p.name: p.advanced for p in row.partitions} for row in window]
    names = sorted(set(advanced[-1]), key=_name_order)
    return [n for n in names if n in marked or all(step.get(n) == 0 for step in advanced)]


def skew_table(rows: list[CheckpointSkew]) -> pd.DataFrame:
    """The per-checkpoint table the expectations run on (unknown values are NaN)."""
    import pandas as pd

    return pd.DataFrame({
        "checkpoint_id": [r.checkpoint_id for r in rows],
        "skew_seconds": [_nan(r.skew_seconds) for r in rows],
        "max_lag_seconds": [_nan(r.max_lag_seconds) for r in rows],
        "unknown_partitions": [len(r.unknown_event_time) for r in rows],
        "rows_dropped_by_watermark": [_nan(r.rows_dropped_by_watermark) for r in rows],
    }, columns=["checkpoint_id", "skew_seconds", "max_lag_seconds", "unknown_partitions",
                "rows_dropped_by_watermark"])


#: (check name, table column, settings attribute, unit)
_LIMITS = (("skew", "skew_seconds", "max_skew", "s"), ("lag", "max_lag_seconds", "max_lag", "s"),
           ("late_rows", "rows_dropped_by_watermark", "max_late_rows", " rows"))


def effective_settings(spec: StageSpec) -> ReportsSpec:
    """``spec.reports`` (defaults when absent) with ``max_late_rows: auto`` resolved: 0 when
    ``event_time.alignment`` is on, else None (not checked)."""
    settings = spec.reports or ReportsSpec()
    if settings.max_late_rows == "auto":
        aligned = spec.event_time is not None and spec.event_time.alignment is not None
        settings = settings.model_copy(update={"max_late_rows": 0 if aligned else None})
    return settings


def _limit(settings: ReportsSpec, attr: str) -> float | None:
    value = getattr(settings, attr)
    return None if value is None or value == "auto" else float(value)


def skew_suite(settings: ReportsSpec) -> dict[str, Any]:
    """The Great Expectations suite document of ``settings`` (limits that are None are left out)."""
    expectations = [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": column, "max_value": limit}}
        for _, column, attr, _unit in _LIMITS if (limit := _limit(settings, attr)) is not None
    ]
    return {"name": "barrierflow-skew", "expectations": expectations}


def run_expectations(rows: list[CheckpointSkew], settings: ReportsSpec) -> list[CheckResult]:
    """Check the per-checkpoint table with Great Expectations (deep verification's runner).

    One check per configured limit, named ``skew``, ``lag`` or ``late_rows``. A failed check's message names
    each offending checkpoint and its value, e.g. ``checkpoint 4: skew 120s > max_skew 60s``."""
    from barrierflow.verification.deep import run_suite

    suite = skew_suite(settings)
    if not rows or not suite["expectations"]:
        return []
    table = skew_table(rows)
    results = run_suite(suite, table, _SUITE_FILE)
    checks = []
    for name, column, attr, unit in _LIMITS:
        limit = _limit(settings, attr)
        if limit is None:
            continue
        result = next((r for r in results if f"column={column!r}" in r.message), None)
        if result is None:  # GE returned no result for it: never pass silently
            checks.append(CheckResult.fail(name, f"{column} <= {attr} {limit:g}{unit} could not be evaluated"))
            continue
        if result.passed:
            known = int(table[column].notna().sum())
            checks.append(CheckResult.ok(name, f"{column} <= {attr} {limit:g}{unit} at all {known} checkpoints "
                                               f"with a known value ({len(rows) - known} unknown)"))
            continue
        offenders = [(int(cid), float(value)) for cid, value in zip(table["checkpoint_id"], table[column], strict=True)
                     if not math.isnan(value) and value > limit]
        if offenders:
            listed = "; ".join(f"checkpoint {cid}: {name} {value:g}{unit} > {attr} {limit:g}{unit}"
                               for cid, value in offenders)
            checks.append(CheckResult.fail(name, listed))
        else:  # GE could not evaluate it: keep its message
            checks.append(CheckResult.fail(name, result.message))
    return checks


def build_skew_report(spec: StageSpec, store: CheckpointStore, *, last: int | None = None,
                      now: datetime | None = None, only: set[int] | None = None) -> SkewReport:
    """The report over the pipeline's completed checkpoints (the newest ``last``, default all).

    Args:
        spec: the pipeline (``reports`` settings; defaults when absent).
        store: its checkpoint store.
        last: report only the newest N checkpoints (>= 1); offsets still advance against the
            checkpoint before them, idle partitions look at the whole timeline.
        now: the report's ``generated`` time (timezone-aware; default now, UTC).
        only: count only these checkpoint ids (a stage of a multi-stage pipeline: the ids of
            its complete global checkpoints); None: every completed one.

    Raises:
        UserInputError: ``last`` below 1, or ``now`` naive.
        StorageError: the store cannot be read.
    """
    if last is not None and last < 1:
        raise UserInputError(f"--last must be a positive whole number, got {last}")
    generated = now or datetime.now(UTC)
    if generated.tzinfo is None:
        raise UserInputError("now must be timezone-aware (e.g. datetime.now(UTC))")
    settings = effective_settings(spec)
    rows = checkpoint_rows([m for m in store.completed() if only is None or m.checkpoint_id in only])
    reported = rows[-last:] if last is not None else rows
    return SkewReport(pipeline=spec.name, storage=store.uri, generated=generated, settings=settings, last=last,
                      checkpoints=reported, idle_partitions=idle_partitions(rows, settings.idle_checkpoints),
                      checks=run_expectations(reported, settings))


def store_skew_report(store: CheckpointStore, report: SkewReport) -> None:
    """Write the JSON document to ``reports/skew-latest.json`` in the checkpoint store."""
    store.objects.put_bytes(SKEW_REPORT_KEY, json.dumps(report.as_dict(), indent=2).encode())


def skew_report(spec: StageSpec, store: CheckpointStore, *, last: int | None = None,
                only: set[int] | None = None) -> SkewReport:
    """Build the report and, when there is a completed checkpoint, store it (see
    :func:`build_skew_report` and :func:`store_skew_report`)."""
    report = build_skew_report(spec, store, last=last, only=only)
    if report.checkpoints:
        store_skew_report(store, report)
    return report


def raise_for_failures(report: SkewReport, spec_path: str) -> None:
    """Raise :class:`SkewExpectationError` naming every failed check (checkpoint and value)."""
    if report.passed:
        return
    failures = [c.message for c in report.failures]
    raise SkewExpectationError(report.as_dict(), failures, (
        f"pipeline {report.pipeline!r}: the watermark-skew report failed its expectations:\n  "
        + "\n  ".join(failures)
        + f"\nSee 'barrierflow skew {spec_path} --html PATH'; the limits are reports.max_skew / reports.max_lag / "
        "reports.max_late_rows of the spec. A lasting skew usually means a slow or stalled source partition; "
        "late rows are lost from event-time windows: set event_time.alignment with max_drift below "
        "event_time.watermark_delay."))


# -- HTML ---------------------------------------------------------------------------------------

_STYLE = """body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
.passed{color:#176f2c}.failed{color:#b00020;font-weight:bold}.unknown{color:#8a6d00}img{max-width:100%}"""


def _png(figure: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def plot_event_times(report: SkewReport) -> str:
    """PNG (base64) of the max event time per partition over the reported checkpoints."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4))
    axes = figure.add_subplot()
    names = sorted({p.name for c in report.checkpoints for p in c.partitions}, key=_name_order)
    for name in names:
        points = [(c.checkpoint_id, p.max_event_time) for c in report.checkpoints for p in c.partitions
                  if p.name == name and p.max_event_time is not None]
        label = name if points else f"{name} (unknown)"
        axes.plot([cid for cid, _ in points], [t for _, t in points], marker="o", label=label)
    axes.set_xlabel("checkpoint")
    axes.set_ylabel("max event time (UTC)")
    axes.set_title("Event time per partition at the barrier")
    if names:
        axes.legend(fontsize="small")
    figure.autofmt_xdate()
    return _png(figure)


def plot_skew(report: SkewReport) -> str:
    """PNG (base64) of the skew per checkpoint, with the ``max_skew`` limit as a line."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3))
    axes = figure.add_subplot()
    points = [(c.checkpoint_id, c.skew_seconds) for c in report.checkpoints if c.skew_seconds is not None]
    axes.plot([cid for cid, _ in points], [s for _, s in points], marker="o", label="skew")
    if report.settings.max_skew is not None:
        axes.axhline(report.settings.max_skew, color="#b00020", linestyle="--",
                     label=f"max_skew {report.settings.max_skew:g}s")
    axes.set_xlabel("checkpoint")
    axes.set_ylabel("skew (s)")
    axes.set_title("Event-time skew (newest - oldest partition)")
    axes.legend(fontsize="small")
    return _png(figure)


def render_skew_html(report: SkewReport) -> str:
    """A self-contained HTML page (no scripts; plots embedded as base64 PNG)."""
    esc = html.escape
    if not report.checkpoints:
        body = f"<p>{esc(NO_CHECKPOINTS)} in {esc(report.storage)}</p>"
    else:
        checks = "".join(f"<li class='{c.status.value}'>{esc(c.name)}: {esc(c.message)}</li>"
                         for c in report.checks) or (
            "<li>no limits configured (reports.max_skew / max_lag / max_late_rows)</li>")
        rows = "".join(
            f"<tr><td>{c.checkpoint_id}</td><td>{esc(c.completion_time.astimezone(UTC).isoformat(timespec='seconds'))}"
            f"</td><td>{_fmt(c.skew_seconds)}</td><td>{_fmt(c.max_lag_seconds)}</td><td>{c.barrier_batch_ms:g}</td>"
            f"<td>{_fmt(c.rows_dropped_by_watermark)}</td>"
            f"<td class='unknown'>{esc(', '.join(c.unknown_event_time))}</td></tr>" for c in report.checkpoints)
        newest = report.checkpoints[-1]
        parts = "".join(
            f"<tr><td>{esc(p.name)}</td><td>{_opt(p.offset)}</td><td>{_opt(p.advanced)}</td>"
            f"<td>{esc(p.max_event_time.isoformat()) if p.max_event_time else '<span class=unknown>unknown</span>'}"
            f"</td><td>{_fmt(p.lag_seconds)}</td>"
            f"<td>{esc(p.watermark.isoformat()) if p.watermark else '<span class=unknown>unknown</span>'}</td>"
            f"<td>{'idle' if p.idle else ''}</td><td>{'paused' if p.paused else ''}</td><td>{p.pauses}</td>"
            f"<td>{p.paused_seconds:g}</td></tr>" for p in newest.partitions)
        body = (
            f"<p>{esc(report.message)}</p><h2>Expectations</h2><ul>{checks}</ul>"
            f"<h2>Event time per partition</h2><img alt='event time per partition' "
            f"src='data:image/png;base64,{plot_event_times(report)}'>"
            f"<h2>Skew</h2><img alt='skew per checkpoint' src='data:image/png;base64,{plot_skew(report)}'>"
            f"<h2>Idle partitions (no new records in the last {report.settings.idle_checkpoints} checkpoints)</h2>"
            f"<p>{esc(', '.join(report.idle_partitions) or 'none')}</p>"
            "<h2>Checkpoints</h2><table><tr><th>checkpoint</th><th>completed (UTC)</th><th>skew (s)</th>"
            f"<th>max lag (s)</th><th>barrier batch (ms)</th><th>rows dropped as late</th>"
            f"<th>unknown event time</th></tr>{rows}</table>"
            f"<h2>Partitions at checkpoint {newest.checkpoint_id}</h2><table><tr><th>partition</th><th>offset</th>"
            f"<th>advanced</th><th>max event time</th><th>lag (s)</th><th>watermark</th><th>idle</th>"
            f"<th>alignment</th><th>pauses</th><th>paused (s)</th></tr>{parts}</table>")
    status = "passed" if report.passed else "failed"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>barrierflow watermark skew: "
            f"{esc(report.pipeline)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>Watermark skew: {esc(report.pipeline)} <span class='{status}'>{status}</span></h1>"
            f"<p>generated {esc(report.generated.astimezone(UTC).isoformat(timespec='seconds'))}</p>"
            f"{body}</body></html>")


# -- helpers ------------------------------------------------------------------------------------

def _fmt(value: float | None) -> str:
    return "<span class='unknown'>unknown</span>" if value is None else f"{value:g}"


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _partition_order(partition: str) -> tuple[int, int | str]:
    return (0, int(partition)) if partition.isdigit() else (1, partition)


def _name_order(name: str) -> tuple[str, tuple[int, int | str]]:
    source, _, partition = name.rpartition("/")
    return source, _partition_order(partition)
