"""The Checkpoints page as HTML: self-contained (inline CSS, plots as data URIs, no scripts,
no internet resources), so it renders the same inside Airflow's iframe and saved to a file.

Every pipeline's section has one table, ``#checkpoints``, whatever its shape: per cut (a
checkpoint; of several stages: a global checkpoint) a row ``tr.cut[data-checkpoint-id=N]``
(status, attempt, times, total ms, verdict), followed by one row per stage
``tr.stage[data-checkpoint-id=N][data-stage=NAME]`` (kind, barrier batch, alignment ms, barrier
batch ms, sync and async ms, full and incremental bytes, mode, channel-state records, back-edge
ranges as ``partition [start, end) records`` joined by ``; ``, each sink's freshness in seconds
as ``sink seconds`` joined by ``; `` (``data-value``: ``sink=seconds`` joined by ``;``), the
stage's verdict), then, for a
pipeline writing lakehouse tables, one row per table
``tr.table[data-checkpoint-id=N][data-stage=STAGE][data-sink=SINK]`` (format, table, status,
Iceberg snapshot id or Delta version, the checkpoint whose commit wrote it). Every value
cell carries the exact value in ``data-value`` (ISO times, ms and bytes as in the manifest) next
to its formatted text, and its field in ``data-field``, so tools (and the acceptance test) can
read the page without parsing formatted numbers.

Above it, ``#savepoints`` lists the pipeline's savepoints (rows ``tr.savepoint[data-savepoint-id=N]``:
attempt, completion time, each stage's barrier batch) and ``#upgrades`` its recorded upgrades,
newest first, the current unfinished one first (one row ``tr.upgrade[data-upgrade=KEY]`` per
upgrade, KEY the object it was read from, with ``data-from=S`` and ``data-in-progress``: from
savepoint, to savepoint, new spec and its sha256, verdict, rescale as ``stage old -> new`` joined
by ``; ``, step, canary checkpoints verified, failure, started and last step), with the same
``data-field``/``data-value`` cells; each record that does not parse is said in
``#upgrade-problems p.error.upgrade-problem[data-key=KEY]``, and the others are still shown.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from urllib.parse import quote

from barrierflow.ui import store_reader
from barrierflow.ui.history import (
    ChannelRange,
    CutRow,
    PipelineEntry,
    PipelineHistory,
    StageRow,
    Verdict,
    VerificationVerdict,
)
from barrierflow.ui.plots import data_uri, history_svg, skew_svg

_STYLE = """body{font-family:system-ui,sans-serif;margin:1em 1.5em;color:#1a1a1a}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}
nav a{margin-right:1em}nav a.current{font-weight:bold;text-decoration:none;color:#1a1a1a}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f4f4f4}td.text{text-align:left}.COMPLETED,.passed{color:#176f2c}
.FAILED,.failed{color:#b00020;font-weight:bold}.muted,.not-verified{color:#777}img{max-width:100%}
.meta span{margin-right:1.5em}.error{color:#b00020;white-space:pre-wrap}
tr.cut td{border-top:2px solid #bbb;font-weight:600}tr.stage td{background:#fafafa}
td.stage-name{padding-left:1.5em}"""

def _iso(moment: datetime | None) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds") if moment else ""


def _cell(field: str, value: object, text: str, css: str = "") -> str:
    raw = "" if value is None else (value.isoformat() if isinstance(value, datetime) else str(value))
    klass = f" class='{css}'" if css else ""
    return f"<td data-field='{field}' data-value='{html.escape(raw, quote=True)}'{klass}>{html.escape(text)}</td>"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def _bytes(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


_COLUMNS = ("ID / stage", "status / kind", "attempt / barrier batch", "trigger time (UTC)", "completion time (UTC)",
            "total ms / alignment ms", "barrier batch ms", "sync ms", "async ms", "full bytes", "incremental bytes",
            "mode", "channel-state records", "back-edge ranges", "freshness s (per sink)", "verification")


def _verification_cell(verdict_of: VerificationVerdict, href: str) -> str:
    verdict = verdict_of.verdict
    if verdict is Verdict.NOT_VERIFIED:
        return (f"<td data-field='verification' data-value='{verdict.value}' class='text not-verified'>"
                "not verified</td>")
    kind = "deep" if verdict_of.deep else "structural"
    return (f"<td data-field='verification' data-value='{verdict.value}' class='text {verdict.value}' "
            f"title='{html.escape(verdict_of.reason, quote=True)}'><a href='{href}'>{verdict.value}</a> ({kind})</td>")


def _ranges(ranges: list[ChannelRange]) -> str:
    return "; ".join(f"{r.partition} [{r.start}, {r.end}) {r.records}" for r in ranges)


def _cut_row(row: CutRow, href: str) -> str:
    status_text = row.status if row.completed else f"{row.status}: {row.failure_reason}"
    status = (f"<td data-field='status' data-value='{row.status}' class='text {row.status}'"
              f" title='{html.escape(row.failure_message or '', quote=True)}'>{html.escape(status_text)}"
              + (f"<br><span class='muted'>{html.escape(row.failure_message or '')}</span>" if not row.completed
                 else "") + "</td>")
    return (f"<tr class='cut' data-checkpoint-id='{row.checkpoint_id}'>"
            + _cell("checkpoint_id", row.checkpoint_id, str(row.checkpoint_id)) + status
            + _cell("attempt", row.attempt, "" if row.attempt is None else str(row.attempt))
            + _cell("trigger_time", row.trigger_time, _iso(row.trigger_time), "text")
            + _cell("completion_time", row.completion_time, _iso(row.completion_time or row.failure_time), "text")
            + _cell("total_ms", row.total_ms, _ms(row.total_ms)) + "<td></td>" * 9
            + _verification_cell(row.verification, href) + "</tr>")


def _stage_row(checkpoint_id: int, row: StageRow, href: str) -> str:
    absent = "" if row.present else " <span class='muted'>(no stage manifest)</span>"
    if row.failure:
        absent += f"<br><span class='muted'>{html.escape(row.failure)}</span>"
    ranges = _ranges(row.back_edge_ranges)
    return (f"<tr class='stage' data-checkpoint-id='{checkpoint_id}' "
            f"data-stage='{html.escape(row.stage, quote=True)}'>"
            f"<td data-field='stage' data-value='{html.escape(row.stage, quote=True)}' class='text stage-name'>"
            f"{html.escape(row.stage)}{absent}</td>"
            + _cell("kind", row.kind, row.kind or "-", "text")
            + _cell("barrier_batch", row.barrier_batch, "" if row.barrier_batch is None else str(row.barrier_batch))
            + "<td></td><td></td>"
            + _cell("alignment_ms", row.alignment_ms, _ms(row.alignment_ms))
            + _cell("barrier_batch_ms", row.barrier_batch_ms, _ms(row.barrier_batch_ms))
            + _cell("sync_ms", row.sync_ms, _ms(row.sync_ms)) + _cell("async_ms", row.async_ms, _ms(row.async_ms))
            + _cell("full_bytes", row.full_bytes, _bytes(row.full_bytes))
            + _cell("incremental_bytes", row.incremental_bytes, _bytes(row.incremental_bytes))
            + _cell("mode", row.mode, row.mode or "-", "text")
            + _cell("channel_state_records", row.channel_state_records, _bytes(row.channel_state_records))
            + _cell("back_edge_ranges", ranges, ranges, "text")
            + _cell("freshness", _freshness_value(row.freshness), _freshness_text(row.freshness), "text")
            + _verification_cell(row.verification, href) + "</tr>")


def _freshness_value(freshness: dict[str, float]) -> str | None:
    """``sink=seconds`` joined by ``;`` (exact), None without figures."""
    return ";".join(f"{sink}={seconds!r}" for sink, seconds in sorted(freshness.items())) or None


def _freshness_text(freshness: dict[str, float]) -> str:
    return "; ".join(f"{sink} {seconds:,.2f}" for sink, seconds in sorted(freshness.items()))


def _table_row(checkpoint_id: int, table: store_reader.CutTable) -> str:
    """One table of a cut: what its cut record says (or that it has none at this checkpoint)."""
    what = "snapshot" if table.format == "iceberg" else "version"
    shown = f"{what} {table.version}" if table.status == store_reader.COMMITTED else table.status
    if table.status != store_reader.COMMITTED and table.commit_every > 1:
        shown += f" (commit_every {table.commit_every})"
    css = "text" if table.status == store_reader.COMMITTED else "text muted"
    return (f"<tr class='table' data-checkpoint-id='{checkpoint_id}' "
            f"data-stage='{html.escape(table.stage, quote=True)}' data-sink='{html.escape(table.sink, quote=True)}'>"
            + _cell("sink", table.name, table.name, "text stage-name")
            + _cell("format", table.format, table.format, "text")
            + _cell("table", table.table, table.table, "text")
            + _cell("status", table.status, shown, css)
            + _cell("version", table.version, "" if table.version is None else str(table.version))
            + _cell("committed_with", table.committed_with,
                    "" if table.committed_with is None else f"committed with {table.committed_with}", "text")
            + f"<td colspan='{len(_COLUMNS) - 6}'></td></tr>")


def _savepoints(history: PipelineHistory) -> str:
    if not history.savepoints:
        return "<h2>Savepoints</h2><p class='muted' id='no-savepoints'>no savepoints</p>"
    rows = []
    for sp in reversed(history.savepoints):  # newest first, as the checkpoints
        batches = "; ".join(f"{stage} {batch}" for stage, batch in sp.barrier_batches.items())
        rows.append(f"<tr class='savepoint' data-savepoint-id='{sp.checkpoint_id}'>"
                    + _cell("checkpoint_id", sp.checkpoint_id, str(sp.checkpoint_id))
                    + _cell("attempt", sp.attempt, str(sp.attempt))
                    + _cell("completion_time", sp.completion_time, _iso(sp.completion_time), "text")
                    + _cell("barrier_batches", batches, batches, "text") + "</tr>")
    head = "".join(f"<th>{c}</th>" for c in ("ID", "attempt", "completion time (UTC)", "barrier batch per stage"))
    return f"<h2>Savepoints (newest first)</h2><table id='savepoints'><tr>{head}</tr>{''.join(rows)}</table>"


_STEP_CSS = {"canary-passed": "passed", "rolled-back": "failed"}


def _upgrade_row(upgrade: store_reader.RecordedUpgrade) -> str:
    record = upgrade.record
    if record is None:
        raise ValueError(f"{upgrade.key} has no record to show: {upgrade.problem}")
    rescale = "; ".join(f"{stage} {' -> '.join(map(str, sizes))}" for stage, sizes in record.rescaled.items())
    step = record.step.value
    shown_step = f"{step} (in progress)" if upgrade.in_progress else step
    if not record.step.final and not upgrade.in_progress:
        shown_step = f"{step} (unfinished)"
    verified = ", ".join(str(c) for c in record.verified)
    return (f"<tr class='upgrade' data-upgrade='{html.escape(upgrade.key, quote=True)}' "
            f"data-from='{record.source_savepoint}' data-in-progress='{str(upgrade.in_progress).lower()}'>"
            + _cell("from_savepoint", record.source_savepoint, str(record.source_savepoint))
            + _cell("to_savepoint", record.savepoint, str(record.savepoint))
            + _cell("new_spec", record.new_spec, record.new_spec, "text")
            + _cell("new_spec_sha256", record.new_spec_sha256, record.new_spec_sha256[:12], "text")
            + _cell("verdict", record.verdict.value, record.verdict.value, "text")
            + _cell("rescale", rescale, rescale or "-", "text")
            + _cell("step", step, shown_step, f"text {_STEP_CSS.get(step, '')}".strip())
            + _cell("canary_verified", verified, f"{len(record.verified)}/{record.canary_checkpoints}"
                    + (f": {verified}" if verified else ""), "text")
            + _cell("failure", record.failure, record.failure, "text")
            + _cell("started", record.started, _iso(record.started) or "-", "text")
            + _cell("updated", record.updated, _iso(record.updated), "text") + "</tr>")


def _upgrades(history: PipelineHistory) -> str:
    problems = "".join(f"<p class='error upgrade-problem' data-key='{html.escape(u.key, quote=True)}'>"
                       f"{html.escape(u.problem)}</p>" for u in history.upgrades if u.record is None)
    problems = f"<div id='upgrade-problems'>{problems}</div>" if problems else ""
    rows = "".join(_upgrade_row(u) for u in history.upgrades if u.record is not None)
    if not rows:
        return "<h2>Upgrades</h2>" + (problems or "<p class='muted' id='no-upgrades'>no upgrade recorded</p>")
    head = "".join(f"<th>{c}</th>" for c in ("from savepoint", "to savepoint", "new spec", "new spec sha256",
                                            "verdict", "rescale", "step", "canary checkpoints verified", "failure",
                                            "started (UTC)", "last step (UTC)"))
    return f"<h2>Upgrades (newest first)</h2>{problems}<table id='upgrades'><tr>{head}</tr>{rows}</table>"


def _table(history: PipelineHistory, base: str, pipeline: str) -> str:
    rows = []
    for row in history.rows:
        href = f"{base}/pipelines/{pipeline}/checkpoints/{row.checkpoint_id}/verification"
        rows.append(_cut_row(row, href) + "".join(_stage_row(row.checkpoint_id, s, href) for s in row.stages)
                    + "".join(_table_row(row.checkpoint_id, t) for t in row.tables))
    return ("<table id='checkpoints'><tr>" + "".join(f"<th>{c}</th>" for c in _COLUMNS) + "</tr>"
            + "".join(rows) + "</table>")


def _nav(pipelines: list[PipelineEntry], current: str | None, base: str) -> str:
    links = []
    for entry in pipelines:
        if entry.spec is None:
            continue
        klass = " class='current'" if entry.name == current else ""
        links.append(f"<a{klass} href='{base}/?pipeline={quote(entry.name)}'>{html.escape(entry.name)}</a>")
    broken = "".join(f"<p class='error'>spec {html.escape(e.path)} does not load: {html.escape(e.error or '')}</p>"
                     for e in pipelines if e.spec is None)
    return f"<nav>Pipelines: {' '.join(links) or '<span class=muted>none</span>'}</nav>{broken}"


def render_pipeline(history: PipelineHistory, base: str, skew_report: dict[str, object] | None) -> str:
    """The section of one pipeline: summary, report links, savepoints, upgrades, the checkpoint
    table and plots."""
    name = quote(history.pipeline)
    links = [f"<a href='{base}/api/pipelines/{name}'>JSON API</a>"]
    links += [f"<a href='{base}/pipelines/{name}/{r.key}'>{html.escape(r.title)}</a>" for r in history.reports]
    verdicts = [s.verification for row in history.rows for s in row.stages]
    if any(v.verdict is not Verdict.NOT_VERIFIED for v in verdicts):
        links.append(f"<a href='{base}/pipelines/{name}/verification'>Verification results</a>")
    if history.rows:
        table = _table(history, base, name)
        plot = (f"<h2>Duration and size history</h2><img id='history-plot' alt='checkpoint durations and sizes' "
                f"src='{data_uri(history_svg(history.rows))}'>")
    else:
        table = f"<p class='muted'>no {html.escape(history.noun)}s yet in {html.escape(history.storage)}</p>"
        plot = ""
    skew = skew_svg(skew_report) if skew_report else None
    skew_html = (f"<h2>Watermark skew (latest report)</h2><img id='skew-plot' alt='watermark skew per checkpoint' "
                 f"src='{data_uri(skew)}'>") if skew else ""
    stages = f"<span>stages: {html.escape(', '.join(history.stages))}</span>"
    title = f"Recent {html.escape(history.noun)}s (newest first; one row per stage under each)"
    return (
        f"<section id='pipeline' data-pipeline='{html.escape(history.pipeline, quote=True)}'>"
        f"<h1>Checkpoints: {html.escape(history.pipeline)}</h1>"
        f"<p class='meta'><span>store <code>{html.escape(history.storage)}</code></span>"
        f"<span>attempt {history.attempt}</span><span>{history.total_completed} completed</span>"
        f"<span>{history.total_failed} failed</span><span>showing the newest {history.shown}</span>{stages}</p>"
        f"<p>{' · '.join(links)}</p>{_savepoints(history)}{_upgrades(history)}"
        f"<h2>{title}</h2>{table}{plot}{skew_html}</section>")


def render_page(pipelines: list[PipelineEntry], history: PipelineHistory | None, base: str,
                skew_report: dict[str, object] | None = None, message: str = "") -> str:
    """The whole page: pipeline navigation, then the selected pipeline (or ``message``)."""
    body = render_pipeline(history, base, skew_report) if history else f"<p class='muted'>{html.escape(message)}</p>"
    current = history.pipeline if history else None
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>barrierflow checkpoints</title>"
            f"<style>{_STYLE}</style></head><body>{_nav(pipelines, current, base)}{body}</body></html>")
