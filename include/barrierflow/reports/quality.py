"""Data-quality report of a pipeline's committed output and its daily rollups (Great Expectations 1.x).

Two suites, declared in the spec next to the state suite (``verification.output_expectations``
and ``verification.rollup_expectations``; defaults ``include/expectations/<name>-output.json``
and ``<name>-rollups.json``; same document format as the state suite, see
:mod:`barrierflow.verification.deep`):

* **output**: the rows the Parquet sink published for the newest ``verification.quality_epochs``
  epochs, i.e. the newest COMMITTED transactions of the sink's 2PC ledger (their batches'
  ``part-*`` files; write-ahead files are never read);
* **rollups**: the days the latest rollup run wrote (``reports/rollups-latest.json``).

Both are validated by one GE Checkpoint whose ``UpdateDataDocsAction`` builds Data Docs in a
scratch folder. GE's pages load Bootstrap, jQuery, Font Awesome and Vega from CDNs and a logo
from S3; every such external ``<script>``/``<link>``/``<img>`` is removed and the ``static/``
links GE gets wrong on deep pages are fixed (:func:`make_offline`), so the pages open offline
(the tables are plain HTML; GE's own styles are local), and the site is stored in the
checkpoint store under ``reports/quality/`` (``index.html``), beside the JSON summary
``reports/quality-latest.json`` that the Checkpoints page links.

A failing expectation is reported with the expectation, its column(s), the unexpected count and
a sample of the bad rows (whole rows, looked up by GE's unexpected index);
:func:`raise_for_failures` turns failures into :class:`QualityExpectationError`.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.pipeline.table_output import (
    cut_checkpoints,
    cut_output,
    describe,
    files_added,
    lake_rollups_uri,
    lake_sink,
    newest_commits,
    table_sink,
)
from barrierflow.sinks.parquet import parquet_sink
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.spec.paths import project_home
from barrierflow.storage import open_store
from barrierflow.storage.object_store import ObjectNotFoundError
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.verification.deep import ephemeral_context, exception_messages, load_suite_document

if TYPE_CHECKING:
    import pandas as pd

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)

QUALITY_REPORT_KEY = "reports/quality-latest.json"
DATA_DOCS_PREFIX = "reports/quality/"
#: Bad rows shown per failed expectation.
SAMPLE_ROWS = 5
_PART = re.compile(r"^part-(\d{12})-a(\d+)-\d{5}\.parquet$")
_EXTERNAL_TAG = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"']?(?:https?:)?//[^>]*>\s*</script>"
    r"|<(?:link|img|iframe|source|embed)\b[^>]*\b(?:href|src)\s*=\s*[\"']?(?:https?:)?//[^>]*>(?:\s*</iframe>)?",
    re.IGNORECASE)
_STATIC_REF = re.compile(r"((?:src|href)\s*=\s*[\"'])(?:\.\./)*static/", re.IGNORECASE)
_EXTERNAL_CSS = re.compile(r"@import\s+url\(\s*[\"']?(?:https?:)?//[^)]*\)\s*;?|url\(\s*[\"']?(?:https?:)?//[^)]*\)",
                           re.IGNORECASE)


class QualityExpectationError(BarrierflowError):
    """An expectation failed; ``report`` holds the whole :class:`QualityReport`."""

    def __init__(self, report: QualityReport, detail: str) -> None:
        self.report = report
        super().__init__(detail)


@dataclass(frozen=True)
class ExpectationFailure:
    """One failed expectation: its type, column(s), kwargs, counts and a sample of bad rows."""

    target: str
    expectation: str
    columns: list[str]
    kwargs: dict[str, Any]
    unexpected_count: int | None
    element_count: int | None
    sample_rows: list[dict[str, Any]]
    error: str = ""

    def describe(self) -> str:
        columns = ", ".join(self.columns) or "(table)"
        if self.error:
            return f"{self.target}: {self.expectation} on {columns} could not be evaluated: {self.error}"
        return (f"{self.target}: {self.expectation} failed on column {columns} ({self.unexpected_count} of "
                f"{self.element_count} rows unexpected; kwargs {self.kwargs}); sample of bad rows: {self.sample_rows}")


@dataclass
class SuiteOutcome:
    """The validation of one target (``output`` or ``rollups``) with one suite."""

    target: str
    suite: str
    rows: int
    expectations: int = 0
    failures: list[ExpectationFailure] = field(default_factory=list)
    skipped: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass
class QualityReport:
    """The JSON document stored as ``reports/quality-latest.json`` (also the DAG's XCom)."""

    pipeline: str
    epochs: list[int]
    output_files: list[str]
    rollup_days: list[str]
    outcomes: list[SuiteOutcome]
    data_docs: str | None = None
    generated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def failures(self) -> list[ExpectationFailure]:
        return [f for o in self.outcomes for f in o.failures]

    @property
    def passed(self) -> bool:
        return not self.failures

    def message(self) -> str:
        parts = [f"{o.target}: skipped ({o.skipped})" if o.skipped
                 else f"{o.target}: {o.expectations} expectations, {len(o.failures)} failed ({o.rows} rows)"
                 for o in self.outcomes]
        verdict = "passed" if self.passed else "FAILED"
        return f"pipeline {self.pipeline!r}: data quality {verdict} (epochs {self.epochs}): " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["passed"] = self.passed
        doc["message"] = self.message()
        return doc


def suite_path(spec: StageSpec, target: str) -> Path:
    """Where the ``output`` or ``rollups`` suite is declared (it may not exist)."""
    settings = spec.verification
    declared = (settings.output_expectations if target == "output" else settings.rollup_expectations) \
        if settings else ""
    if declared:
        path = Path(declared)
        return path if path.is_absolute() else project_home() / path
    return project_home() / "include" / "expectations" / f"{spec.name}-{target}.json"


def newest_epochs(spec: StageSpec, store: CheckpointStore, count: int) -> list[tuple[int, int, list[int]]]:
    """``(checkpoint id, attempt, batches)`` of the newest ``count`` COMMITTED transactions of the
    Parquet sink, oldest first."""
    sink = parquet_sink(spec)
    committed = sorted((t for t in TransactionLedger(store.objects, spec.name).list(sink.name)
                        if t.state is TxnState.COMMITTED), key=lambda t: t.checkpoint_id)
    return [(t.checkpoint_id, t.attempt, list(t.batches)) for t in committed[-count:]]


def read_epochs(output_uri: str, epochs: list[tuple[int, int, list[int]]]) -> tuple[pd.DataFrame, list[str]]:
    """The published rows of ``epochs`` and the files they came from."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = {(batch, attempt) for _, attempt, batches in epochs for batch in batches}
    objects = open_store(output_uri)
    keys = [o.key for o in objects.list("part-")
            if (m := _PART.match(o.key)) and (int(m.group(1)), int(m.group(2))) in wanted]
    tables = [pq.read_table(io.BytesIO(objects.get_bytes(k))) for k in sorted(keys)]
    if not tables:
        return pd.DataFrame(), []
    return _plain_frame(pa.concat_tables(tables, promote_options="default")), sorted(keys)


def table_epochs(spec: StageSpec, store: CheckpointStore, count: int) -> tuple[list[int], pd.DataFrame, list[str]]:
    """An Iceberg or Delta sink's newest ``count`` commits as of the table's newest cut: their
    checkpoint ids, the rows they added (the data files of the cut's version that the version
    before the oldest of them lacks; a compaction in between adds the files it rewrote) and
    those files. Nothing when no cut is recorded yet."""
    import pandas as pd

    sink = table_sink(spec)
    assert sink is not None
    if not cut_checkpoints(store, sink):
        return [], pd.DataFrame(), []
    version = cut_output(spec, store).table_version
    ids, before = newest_commits(spec, version, count)
    files = files_added(spec, version, before) if ids else []
    return ids, read_files(files or []), files or []


def read_files(uris: list[str]) -> pd.DataFrame:
    """The rows of the Parquet files ``uris`` (storage URIs), in that order."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for uri in uris:
        folder, _, name = uri.rpartition("/")
        tables.append(pq.read_table(io.BytesIO(open_store(folder).get_bytes(name))))
    return _plain_frame(pa.concat_tables(tables, promote_options="default")) if tables else pd.DataFrame()


def read_rollups(rollups_uri: str, days: list[str]) -> pd.DataFrame:
    """The rollup rows of ``days`` (column ``day`` added from the partition folder)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    objects = open_store(rollups_uri)
    tables = []
    for day in days:
        for info in objects.list(f"day={day}/"):
            if info.key.endswith(".parquet"):
                table = pq.read_table(io.BytesIO(objects.get_bytes(info.key)))
                tables.append(table.append_column("day", pa.array([day] * table.num_rows, pa.string())))
    return _plain_frame(pa.concat_tables(tables, promote_options="default")) if tables else pd.DataFrame()


def _plain_frame(table: Any) -> pd.DataFrame:
    frame = table.to_pandas()
    for column in frame.columns:
        if str(frame[column].dtype).startswith("datetime64"):
            frame[column] = frame[column].dt.tz_convert("UTC") if frame[column].dt.tz else frame[column]
    return frame.reset_index(drop=True)


def _columns(kwargs: dict[str, Any]) -> list[str]:
    for name in ("column", "column_list", "column_set"):
        if name in kwargs:
            value = kwargs[name]
            return [str(c) for c in value] if isinstance(value, list | tuple | set) else [str(value)]
    return [str(kwargs[k]) for k in ("column_A", "column_B") if k in kwargs]


def _sample(frame: pd.DataFrame, indexes: list[Any] | None) -> list[dict[str, Any]]:
    if not indexes:
        return []
    rows = frame.loc[[i for i in indexes if i in frame.index][:SAMPLE_ROWS]]
    return json.loads(rows.to_json(orient="records", date_format="iso"))


def make_offline(site: Path) -> int:
    """Remove every external ``<script src>``, ``<link href>``, ``<img src>`` (GE's logo is served
    from S3) and CSS ``url()`` from the HTML and CSS
    files under ``site``; returns how many references were removed."""
    removed = 0
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        text = path.read_text(encoding="utf-8")
        pattern = _EXTERNAL_TAG if path.suffix == ".html" else _EXTERNAL_CSS
        cleaned, count = pattern.subn("", text)
        if path.suffix == ".html":
            cleaned, css = _EXTERNAL_CSS.subn("", cleaned)
            # GE links static/ one level short from validation pages (4 folders deep): point every
            # static/ reference at the site's own static/ folder from this page's depth.
            depth = "../" * (len(path.relative_to(site).parts) - 1)
            cleaned = _STATIC_REF.sub(lambda m, up=depth: f"{m.group(1)}{up}static/", cleaned)
            count += css
        if cleaned != text:
            path.write_text(cleaned, encoding="utf-8")
            removed += count
    return removed


def _validate(targets: list[tuple[str, pd.DataFrame, dict[str, Any], str]], docs: Path
              ) -> dict[str, list[tuple[Any, Any]]]:
    """Run each ``(target, rows, suite document, suite file)`` through one GE Checkpoint that builds
    Data Docs in ``docs``; returns per target the ``(expectation config, result)`` pairs."""
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    context = ephemeral_context()
    context.add_data_docs_site(site_name="barrierflow", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    })
    source = context.data_sources.add_pandas("barrierflow")
    out: dict[str, list[tuple[Any, Any]]] = {}
    for target, rows, document, _ in targets:
        batch_definition = source.add_dataframe_asset(target).add_batch_definition_whole_dataframe(target)
        suite = gx.ExpectationSuite(name=f"{document.get('name') or target}")
        for item in document["expectations"]:
            suite.add_expectation_configuration(
                ExpectationConfiguration(type=item["type"], kwargs=dict(item.get("kwargs", {}))))
        suite = context.suites.add(suite)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=target, data=batch_definition, suite=suite))
        checkpoint = context.checkpoints.add(gx.Checkpoint(
            name=f"quality-{target}", validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="data-docs")],
            result_format={"result_format": "SUMMARY"}))
        result = checkpoint.run(batch_parameters={"dataframe": rows})
        out[target] = [(r.expectation_config, r) for run in result.run_results.values() for r in run.results]
    return out


def quality_report(spec: StageSpec, store: CheckpointStore, *, epochs: int | None = None,
                   rollup_days: list[str] | None = None) -> QualityReport:
    """Validate the newest ``epochs`` committed epochs (default ``verification.quality_epochs``) and
    the rollups of ``rollup_days``; store the report and the offline Data Docs in the checkpoint
    store. Failures are in the report, not raised (see :func:`raise_for_failures`).

    An Iceberg or Delta table is read as of its newest cut: the rows its sink's newest ``epochs``
    commits up to that cut added (:func:`table_epochs`).

    Raises UserInputError for a pipeline without a Parquet, Iceberg or Delta sink, ``epochs``
    below 1, or a suite file that is not a suite (naming it)."""
    sink = lake_sink(spec)
    count = epochs if epochs is not None else (spec.verification.quality_epochs if spec.verification else 3)
    if count < 1:
        raise UserInputError(f"epochs must be at least 1, got {count}")
    if isinstance(sink, ParquetSinkSpec):
        chosen = newest_epochs(spec, store, count)
        output, files = read_epochs(sink.path, chosen)
        epoch_ids, where = [cid for cid, _, _ in chosen], sink.path
    else:
        epoch_ids, output, files = table_epochs(spec, store, count)
        where = f"{describe(sink)} (as of its newest cut)"
    rollups_at = lake_rollups_uri(spec)
    days = sorted(rollup_days or [])
    rollups = read_rollups(rollups_at, days) if days else None
    outcomes: list[SuiteOutcome] = []
    targets: list[tuple[str, pd.DataFrame, dict[str, Any], str]] = []
    for target, rows, empty_reason in (
            ("output", output, f"no committed epoch in {where} yet"),
            ("rollups", rollups, f"no rollups in {rollups_at} yet (the rollup DAG has not written a day)")):
        path = suite_path(spec, target)
        outcome = SuiteOutcome(target, str(path), 0 if rows is None else len(rows))
        outcomes.append(outcome)
        if rows is None or rows.empty:
            outcome.skipped = empty_reason
        elif not path.is_file():
            outcome.skipped = f"no suite at {path}"
        else:
            targets.append((target, rows, load_suite_document(path), str(path)))
    docs_key = None
    if targets:
        scratch = Path(tempfile.mkdtemp(prefix=f"quality-{spec.name}-"))
        try:
            results = _validate(targets, scratch / "site")
            for target, rows, document, _ in targets:
                outcome = next(o for o in outcomes if o.target == target)
                outcome.expectations = len(document["expectations"])
                outcome.failures = [_failure(target, config, result, rows) for config, result in results[target]
                                    if not result.success]
            removed = make_offline(scratch / "site")
            log.info("Data Docs: removed %d external resource references", removed)
            docs_key = _store_site(store, scratch / "site")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    report = QualityReport(spec.name, epoch_ids, files, days, outcomes, docs_key)
    store.objects.put_bytes(QUALITY_REPORT_KEY, json.dumps(report.as_dict(), indent=2, default=str).encode())
    log.info("%s", report.message())
    return report


def _failure(target: str, config: Any, result: Any, rows: pd.DataFrame) -> ExpectationFailure:
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    detail = result.result or {}
    errors = exception_messages(result.exception_info)
    return ExpectationFailure(
        target=target, expectation=config.type, columns=_columns(kwargs),
        kwargs=json.loads(json.dumps(kwargs, default=str)),
        unexpected_count=detail.get("unexpected_count"), element_count=detail.get("element_count", len(rows)),
        sample_rows=_sample(rows, detail.get("partial_unexpected_index_list")),
        error="; ".join(errors)[:2000])


def _store_site(store: CheckpointStore, site: Path) -> str | None:
    """Replace ``reports/quality/`` with the site; returns the index's key."""
    old = [o.key for o in store.objects.list(DATA_DOCS_PREFIX)]
    if old:
        store.objects.delete_many(old)
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        store.objects.put_file(DATA_DOCS_PREFIX + path.relative_to(site).as_posix(), str(path))
    index = DATA_DOCS_PREFIX + "index.html"
    return index if store.objects.exists(index) else None


def stored_report(store: CheckpointStore) -> dict[str, Any] | None:
    """The stored ``reports/quality-latest.json``, or None."""
    try:
        return json.loads(store.objects.get_bytes(QUALITY_REPORT_KEY))
    except ObjectNotFoundError:
        return None


def raise_for_failures(report: QualityReport, spec_path: str) -> None:
    """QualityExpectationError naming every failed expectation, its column(s) and bad rows."""
    if report.passed:
        return
    lines = [f.describe() for f in report.failures]
    raise QualityExpectationError(report, (
        f"pipeline {report.pipeline!r}: {len(lines)} expectation(s) failed on the committed output "
        f"(epochs {report.epochs}) or rollups (days {report.rollup_days}):\n  " + "\n  ".join(lines)
        + f"\nData Docs: {DATA_DOCS_PREFIX}index.html in the checkpoint store; suites: "
        + ", ".join(o.suite for o in report.outcomes) + f" (declared in {spec_path})"))
