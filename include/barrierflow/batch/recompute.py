"""The stream-vs-batch comparison: recompute the pipeline's output for a closed event-time
range from the source's records (Spark batch, the spec's own transformation) and compare it,
row by row, with what the stream committed (``barrierflow recompute``, the ``recompute`` DAG).

The closed range. The stream's committed output is trusted up to the newest checkpoint whose
sink transaction is COMMITTED (the 2PC ledger): its barrier batch V ran with the watermark
``batchWatermarkMs`` recorded in Spark's offset log ``offsets/V`` (stored with the
checkpoint), and a windowed aggregation in append mode has emitted every window whose end is
at or before that watermark by batch V. So the default range is every window that ends
before that watermark (``end``), from the source's first record (``start``); a narrower
``[start, end)`` may be given, but never one past the watermark (those windows are still
open). Both sides are restricted to the windows inside the range.

The comparison joins on ``batch.window_columns`` + ``batch.keys`` (one output row each) and
names every difference: ``changed`` (a measure differs), ``missing`` (the batch has the row,
the stream committed none), ``extra`` (the stream committed a row the source does not
produce) and ``duplicated`` (the stream committed the row more than once).

Only committed files are read (:func:`barrierflow.batch.lake.committed_parts`). An Iceberg or
Delta table is read as of a cut (:mod:`barrierflow.pipeline.table_output`): the trusted
checkpoint is the newest completed one with a cut record, and the rows compared are those of the
table version that cut names, never the table's latest state.

A Kafka source is read again over the offset ranges the trusted checkpoint covers
(:func:`barrierflow.batch.source_records.kafka_ranges`): up to its barrier offsets, from where
the stream began or, when Kafka no longer retains that (or a ``start`` is given), from the
barrier offsets of an earlier checkpoint; then only the windows that start after the newest
event time read up to that checkpoint are compared (the report's ``start``).

When the comparison cannot apply (the pipeline has no event time, so no window is ever closed;
its output mode is not append; the range's first records are no longer retained by Kafka),
no rows are compared: the report says ``not compared`` and why, in one line
(:attr:`RecomputeReport.not_compared`), and it is stored as any report is.

The report is stored at :data:`RECOMPUTE_REPORT_KEY` (``reports/recompute-latest.json``).
Before this comparison was named "recompute" everywhere, the same document was stored at
:data:`LEGACY_RECOMPUTE_REPORT_KEY` (``reports/reconciliation-latest.json``); nothing writes
that key any more, but the readers of the stored report (``barrierflow.ops.batch``, the
Checkpoints page) fall back to it when no report exists under the new key. ("Reconcile" names
only the 2PC in-doubt resolution, :mod:`barrierflow.recovery.reconcile`.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.batch.lake import committed_parts, parquet_sink, spark_path
from barrierflow.batch.source_records import (
    KafkaRanges,
    NotComparableError,
    after_events,
    kafka_ranges,
    source_records,
)
from barrierflow.checkpointing.store import CheckpointStore, shared_key
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.pipeline.table_output import cut_output, lake_sink, table_sink, trusted_cut
from barrierflow.sinks.parquet import write_ahead_uri
from barrierflow.spec.models import KafkaSourceSpec, ParquetSinkSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.transforms.context import TransformContext, load_transformation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)

#: Where :func:`recompute_and_compare` stores its report (the latest one; each run replaces it).
RECOMPUTE_REPORT_KEY = "reports/recompute-latest.json"
#: Where the same report was stored before the rename: read (when no report is stored under
#: :data:`RECOMPUTE_REPORT_KEY`), never written.
LEGACY_RECOMPUTE_REPORT_KEY = "reports/reconciliation-latest.json"
#: Where :func:`compare_held_output` stores its report (an upgrade's canary; each run replaces it).
CANARY_RECOMPUTE_REPORT_KEY = "reports/canary-recompute-latest.json"
#: How many differences the report lists (the count is always exact).
MAX_LISTED = 10_000
#: How many differences an error message names.
MAX_IN_MESSAGE = 20
_ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"


class OutputMismatchError(BarrierflowError):
    """The stream's committed output differs from the batch recomputation.

    Attributes:
        report: the :class:`RecomputeReport` (its JSON document is stored too).
    """

    def __init__(self, report: RecomputeReport) -> None:
        self.report = report
        super().__init__(report.message())


@dataclass(frozen=True)
class Difference:
    """One differing output row: ``kind`` (changed, missing, extra, duplicated), the window and
    key columns that identify it, the stream's committed rows (measures; several when
    duplicated, none when missing) and the batch's row (None when extra)."""

    kind: str
    window: dict[str, Any]
    key: dict[str, Any]
    stream: list[dict[str, Any]]
    batch: dict[str, Any] | None

    def describe(self) -> str:
        window = ", ".join(f"{k}={v}" for k, v in self.window.items())
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        return f"{self.kind}: window [{window}] key [{key}]: stream {self.stream}, batch {self.batch}"


@dataclass
class RecomputeReport:
    """The outcome of one stream-vs-batch comparison; :meth:`as_dict` is the JSON document stored
    at :data:`RECOMPUTE_REPORT_KEY`. ``passed``: no differing row (``difference_count`` is
    exact; ``differences`` lists at most :data:`MAX_LISTED`)."""

    pipeline: str
    checkpoint_id: int
    watermark: str
    start: str | None
    end: str
    stream_rows: int
    batch_rows: int
    differences: list[Difference] = field(default_factory=list)
    difference_count: int = 0
    tag: str = ""
    generated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    #: The held (pre-committed, not yet committed) epochs whose output was compared with the
    #: committed output (:func:`compare_held_output`, an upgrade's canary); empty for ``recompute``.
    held_epochs: list[int] = field(default_factory=list)
    #: Only windows ending after this were compared (a rebuilt state's canary), else None.
    ends_after: str | None = None
    #: Why nothing was compared ("" when the rows were compared): one line.
    not_compared: str = ""
    #: Where the re-read of each Kafka source started (``checkpoint N``, ``the stream's first
    #: offsets``) and its offset ranges, by source name; empty for the generator.
    source_ranges: dict[str, Any] = field(default_factory=dict)
    #: An Iceberg or Delta table: the version (snapshot id, Delta version) of the cut of
    #: ``checkpoint_id`` whose rows were compared; None for a Parquet lake.
    table_version: int | None = None

    @property
    def compared(self) -> bool:
        return not self.not_compared

    @property
    def passed(self) -> bool:
        """Rows were compared and none differs (a report that compared nothing did not pass)."""
        return self.compared and self.difference_count == 0

    @property
    def verdict(self) -> str:
        """``passed``, ``differed`` or ``not compared``."""
        return "not compared" if not self.compared else "passed" if self.passed else "differed"

    def message(self) -> str:
        if not self.compared:
            return f"pipeline {self.pipeline!r}: stream-vs-batch comparison not compared: {self.not_compared}"
        span = f"[{self.start or 'first record'}, {self.end})"
        if self.ends_after is not None:
            span += f" ending after {self.ends_after}"
        output = (f"the committed output with the held epochs {self.held_epochs}" if self.held_epochs
                  else f"the table as of the cut of checkpoint {self.checkpoint_id} (version {self.table_version})"
                  if self.table_version is not None else "the committed output")
        held = f"; held epochs {self.held_epochs} read uncommitted" if self.held_epochs else ""
        if self.passed:
            return (f"pipeline {self.pipeline!r}: {output} equals the batch recomputation for windows in "
                    f"{span} ({self.stream_rows} rows; checkpoint {self.checkpoint_id}, watermark {self.watermark})")
        lines = [d.describe() for d in self.differences[:MAX_IN_MESSAGE]]
        if self.difference_count > len(lines):
            key = CANARY_RECOMPUTE_REPORT_KEY if self.held_epochs else RECOMPUTE_REPORT_KEY
            lines.append(f"... and {self.difference_count - len(lines)} more (see {key})")
        return (f"pipeline {self.pipeline!r}: {self.difference_count} output rows differ from the batch "
                f"recomputation for windows in {span} (stream {self.stream_rows} rows, batch {self.batch_rows}; "
                f"checkpoint {self.checkpoint_id}{held}):\n  " + "\n  ".join(lines))

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["passed"] = self.passed
        doc["compared"] = self.compared
        doc["verdict"] = self.verdict
        doc["message"] = self.message()
        return doc


def trusted_checkpoint(spec: StageSpec, store: CheckpointStore) -> Manifest:
    """The newest completed checkpoint whose sink transaction is COMMITTED (its epoch's output
    is in the lake; an Iceberg or Delta table: that has a cut record). Raises UserInputError
    when there is none."""
    if table_sink(spec) is not None:
        return trusted_cut(spec, store)[0]
    sink = parquet_sink(spec)
    committed = {t.checkpoint_id for t in TransactionLedger(store.objects, spec.name).list(sink.name)
                 if t.state is TxnState.COMMITTED}
    for manifest in reversed(store.completed()):
        if manifest.checkpoint_id in committed:
            return manifest
    raise UserInputError(
        f"pipeline {spec.name!r} has no completed checkpoint whose output is committed in {sink.path}: run the "
        "pipeline until a checkpoint completes (or reconcile its in-doubt transactions: 'barrierflow reconcile SPEC')")


def barrier_watermark(store: CheckpointStore, manifest: Manifest) -> datetime:
    """The watermark its barrier batch ran with (``batchWatermarkMs`` of the stored ``offsets/V``)."""
    wanted = f"offsets/{manifest.spark_batch_id}"
    entry = next((f for f in manifest.files if f.path.endswith(wanted)), None)
    if entry is None:
        raise UserInputError(f"checkpoint {manifest.checkpoint_id} does not hold {wanted}; verify it with "
                             "'barrierflow verify SPEC'")
    first_line = store.objects.get_bytes(shared_key(entry.sha256)).decode().splitlines()[1]
    millis = int(json.loads(first_line).get("batchWatermarkMs", 0))
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def closed_range(spec: StageSpec, store: CheckpointStore, start: datetime | None, end: datetime | None
                 ) -> tuple[Manifest, datetime, datetime | None, datetime]:
    """``(trusted checkpoint, its watermark, start, end)``; ``end`` defaults to the watermark.
    Raises UserInputError for a naive datetime, an empty range or an end past the watermark."""
    for name, value in (("start", start), ("end", end)):
        if value is not None and value.tzinfo is None:
            raise UserInputError(f"{name} {value.isoformat()} has no timezone: give e.g. 2026-01-01T00:00:00+00:00")
    manifest = trusted_checkpoint(spec, store)
    watermark = barrier_watermark(store, manifest)
    end = watermark if end is None else end
    if end > watermark:
        raise UserInputError(
            f"end {end.isoformat()} is after the watermark {watermark.isoformat()} of checkpoint "
            f"{manifest.checkpoint_id} (the newest with committed output): windows ending after it are not closed "
            "yet; leave end empty to use the watermark")
    if start is not None and start >= end:
        raise UserInputError(f"the range [{start.isoformat()}, {end.isoformat()}) is empty: start must be before end")
    return manifest, watermark, start, end


def _in_range(df: DataFrame, spec: StageSpec, start: datetime | None, end: datetime,
              ends_after: datetime | None = None) -> DataFrame:
    from pyspark.sql import functions as F

    first, last = spec.batch.window_columns[0], spec.batch.window_columns[-1]
    out = df.filter(F.col(last) < F.lit(end))  # strictly before: a window ending at the watermark may be open
    if ends_after is not None:
        out = out.filter(F.col(last) > F.lit(ends_after))
    return out if start is None else out.filter(F.col(first) >= F.lit(start))


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()}


#: How the batch side of the comparison is computed: ``(start, end, kafka) -> output rows`` (the
#: windows outside the range are dropped by the caller); ``kafka``: the offset ranges to read of
#: each Kafka-fed source stage, by stage name (:data:`KafkaSources`).
Recomputation = Callable[[datetime | None, datetime, "dict[str, KafkaRanges]"], "DataFrame"]
#: The Kafka-fed source stages of a recomputation: stage name (``""`` for a single stage) ->
#: (its spec, its checkpoint store, whose manifests record the offsets it read).
KafkaSources = dict[str, "tuple[StageSpec, CheckpointStore]"]


def kafka_sources(spec: StageSpec, store: CheckpointStore) -> KafkaSources:
    """The Kafka source of a single-stage pipeline (``""``), or none."""
    return {"": (spec, store)} if isinstance(spec.source, KafkaSourceSpec) else {}


def plan_kafka_reads(sources: KafkaSources, checkpoint_id: int, *, start: datetime | None,
                     since: int | None = None, before: datetime | None = None
                     ) -> tuple[dict[str, KafkaRanges], datetime | None]:
    """The offset ranges to read of each Kafka-fed source stage, up to the barrier offsets of
    its checkpoint ``checkpoint_id`` (from those of ``since`` when given), and the start of the
    windows they hold whole: ``start``, or later when a range starts at a checkpoint
    (:func:`barrierflow.batch.source_records.kafka_ranges`; ``before``: the end of the compared
    range, which such a later start must be before).

    Raises:
        NotComparableError: a range's first records are no longer retained.
        SourceError: the brokers cannot be asked.
    """
    plans: dict[str, KafkaRanges] = {}
    first = start
    for stage, (stage_spec, stage_store) in sources.items():
        source = stage_spec.source
        assert isinstance(source, KafkaSourceSpec)
        ranges = kafka_ranges(source, stage_store.get(checkpoint_id), stage_store.completed(), start=start,
                              since=None if since is None else stage_store.get(since), before=before)
        plans[stage] = ranges
        if ranges.after is not None and (first is None or ranges.after > first):
            first = ranges.after
    return plans, first


def comparison_obstacle(spec: StageSpec) -> str:
    """Why the stream-vs-batch comparison cannot apply to ``spec``'s output at all ("" when it
    can), one line: no event time, or an output mode other than append."""
    if spec.transformation.output_mode != "append":
        return (f"its output mode is {spec.transformation.output_mode!r}: the rows it writes depend on how the "
                "stream cut its micro-batches, a batch run gives one final row per key (append mode only)")
    if spec.event_time is None:
        return "it has no event time: no window is ever closed, so there is no range to compare"
    return ""


class OutputColumnsError(UserInputError):
    """The output (or the batch recomputation) lacks a column ``batch.window_columns``,
    ``batch.keys`` or ``batch.measures`` name: the comparison is not configured for it."""


def recompute_and_compare(spark: SparkSession, spec: StageSpec, store: CheckpointStore, *,
                          start: datetime | None = None, end: datetime | None = None, tag: str = "",
                          spec_path: str = "<spec>", recompute: Recomputation | None = None,
                          kafka: KafkaSources | None = None) -> RecomputeReport:
    """Recompute and compare (module docstring); stores the report at :data:`RECOMPUTE_REPORT_KEY`
    of ``store`` and returns it (differences are in the report, not raised: see
    :class:`OutputMismatchError`; a comparison that cannot apply is a report too, ``not
    compared`` with why).

    ``spec`` and ``store`` are the pipeline's, or a final stage's derived spec and its own store
    (its sink, ledger and checkpoints). ``recompute``: how the batch side is computed; default
    the spec's transformation over its source's records (one stage); a final stage of several
    passes :func:`barrierflow.batch.stage_replay.replay_final_stage`, and ``kafka`` its
    Kafka-fed source stages (default: the spec's own source, when it is Kafka).

    Raises:
        UserInputError: a bad range, nothing committed, or (:class:`OutputColumnsError`) the
            output lacks the columns the spec's ``batch`` section names.
    """
    sink = lake_sink(spec)
    if why := comparison_obstacle(spec):
        return not_compared(spec, store, RECOMPUTE_REPORT_KEY, why, tag=tag)
    manifest, watermark, start, end = closed_range(spec, store, start, end)
    table_version = None
    if isinstance(sink, ParquetSinkSpec):
        paths = [spark_path(sink.path, p.key) for p in committed_parts(sink.path)]
        if not paths:
            raise UserInputError(f"pipeline {spec.name!r} has no committed output in {sink.path} although checkpoint "
                                 f"{manifest.checkpoint_id} committed; check the sink's folder")
    else:
        cut = cut_output(spec, store, manifest.checkpoint_id)  # the table as of the trusted cut, not its latest
        paths, table_version = [spark_path(f) for f in cut.files], cut.table_version
    sources = kafka_sources(spec, store) if kafka is None else kafka
    try:
        ranges, start = plan_kafka_reads(sources, manifest.checkpoint_id, start=start, before=end)
    except NotComparableError as exc:
        return not_compared(spec, store, RECOMPUTE_REPORT_KEY, str(exc), tag=tag, checkpoint_id=manifest.checkpoint_id,
                             watermark=watermark, end=end)
    if start is not None and start >= end:
        return not_compared(spec, store, RECOMPUTE_REPORT_KEY, (
            f"the re-read of the source starts at {ranges_origin(ranges)}, whose windows start at or after "
            f"{start.isoformat()}, not before the watermark {end.isoformat()} of checkpoint {manifest.checkpoint_id}: "
            "no closed window to compare yet"), tag=tag, checkpoint_id=manifest.checkpoint_id, watermark=watermark,
            end=end)
    report = compare_output(spark, spec, paths,
                            checkpoint_id=manifest.checkpoint_id, watermark=watermark, start=start, end=end,
                            tag=tag, spec_path=spec_path, recompute=recompute, kafka=ranges)
    report.table_version = table_version
    store.objects.put_bytes(RECOMPUTE_REPORT_KEY, json.dumps(report.as_dict(), indent=2, default=str).encode())
    log.info("%s", report.message())
    return report


def ranges_origin(ranges: dict[str, KafkaRanges]) -> str:
    """Where the re-read of each Kafka source starts, for messages."""
    return ", ".join(f"{r.origin} ({r.source}{f' of stage {stage}' if stage else ''})" for stage, r in ranges.items())


def not_compared(spec: StageSpec, store: CheckpointStore, key: str, why: str, *, tag: str,
                  checkpoint_id: int = -1, watermark: datetime | None = None, end: datetime | None = None
                  ) -> RecomputeReport:
    """The report of a comparison that could not apply, ``why`` in one line (stored at ``key``
    of ``store``; logged)."""
    report = RecomputeReport(
        pipeline=spec.name, checkpoint_id=checkpoint_id, watermark=watermark.isoformat() if watermark else "",
        start=None, end=end.isoformat() if end else "", stream_rows=0, batch_rows=0, tag=tag,
        not_compared=" ".join(why.split()))
    store.objects.put_bytes(key, json.dumps(report.as_dict(), indent=2, default=str).encode())
    log.warning("%s", report.message())
    return report


@dataclass(frozen=True)
class HeldOutput:
    """What a Parquet sink's held epochs (2PC pre-committed, not committed: an upgrade's canary)
    would publish once committed: ``epochs`` (checkpoint ids of the PRECOMMITTED transactions
    up to and including ``checkpoint_id``) and ``files`` (their write-ahead files, as paths Spark
    reads, in commit order)."""

    checkpoint_id: int
    epochs: list[int]
    files: list[str]


def held_output(spec: StageSpec, store: CheckpointStore, checkpoint_id: int) -> HeldOutput:
    """The held output of the spec's Parquet sink up to checkpoint ``checkpoint_id``: every
    PRECOMMITTED transaction of a checkpoint <= ``checkpoint_id`` (what a reconciliation against
    that checkpoint commits) and the write-ahead files its handle names (the ``files`` the
    Parquet sink's pre-commit recorded, per batch: exactly what its commit publishes). Reads
    the ledger only, never a row. Raises UserInputError when the transaction of
    ``checkpoint_id`` itself is not pre-committed (nothing is held for it)."""
    sink = parquet_sink(spec)
    held = [t for t in TransactionLedger(store.objects, spec.name).list(sink.name)
            if t.state is TxnState.PRECOMMITTED and t.checkpoint_id <= checkpoint_id]
    if not any(t.checkpoint_id == checkpoint_id for t in held):
        raise UserInputError(
            f"pipeline {spec.name!r}: sink {sink.name} holds no pre-committed epoch of checkpoint {checkpoint_id}; "
            "only the held output of a canary (whose epochs are pre-committed, not committed) can be compared so")
    files = []
    for txn in sorted(held, key=lambda t: t.checkpoint_id):
        staging = str(txn.handle.get("staging") or write_ahead_uri(sink.path))
        for batch in txn.batches:
            files.extend(spark_path(staging, key) for key in txn.handle.get("files", {}).get(str(batch), []))
    return HeldOutput(checkpoint_id, sorted(t.checkpoint_id for t in held), files)


def compare_held_output(spark: SparkSession, spec: StageSpec, store: CheckpointStore, checkpoint_id: int, *,
                        since: int | None = None, tag: str = "", spec_path: str = "<spec>",
                        recompute: Recomputation | None = None,
                        report_key: str = CANARY_RECOMPUTE_REPORT_KEY,
                        ends_after: int | None = None,
                        kafka: KafkaSources | None = None) -> tuple[RecomputeReport, HeldOutput]:
    """The comparison of what the lake will show once the held epochs up to checkpoint
    ``checkpoint_id`` are committed (the committed ``part-*`` files and :func:`held_output`'s
    write-ahead files, read by Spark where they lie: nothing is committed, moved or collected)
    with the batch recomputation, over every window that ends before the watermark checkpoint
    ``checkpoint_id``'s barrier batch ran with (the closed range of :func:`closed_range`, with
    that checkpoint trusted because its output is held). With ``since`` (the checkpoint the held
    epochs continue from), only the windows that start after the newest event time read up to
    ``since`` (:func:`after_events`): the windows computed from their first record after it. With
    ``ends_after`` instead (a checkpoint whose state was rebuilt from the input, so that every
    window the new definition emits after it holds all its records), every window that ends
    after the watermark that checkpoint's barrier batch ran with, from the first record. The
    report is stored at
    ``report_key`` of ``store`` (not at :data:`RECOMPUTE_REPORT_KEY`: it is not about committed
    output). A Kafka source (``kafka``, default the spec's own) is read again over the offsets
    from ``since``'s barrier to ``checkpoint_id``'s (with ``ends_after``, or without ``since``:
    as :func:`recompute_and_compare` reads it).

    Raises:
        UserInputError: nothing held for ``checkpoint_id``, or (:class:`OutputColumnsError`)
            the output lacks the columns the spec's ``batch`` section names;
            (:class:`~barrierflow.batch.source_records.NotComparableError`) a Kafka range is no
            longer retained.
    """
    sink = parquet_sink(spec)
    held = held_output(spec, store, checkpoint_id)
    manifest = store.get(checkpoint_id)
    watermark = barrier_watermark(store, manifest)
    start = None if since is None else min(after_events(store.get(since)), watermark)  # min: an empty range
    after = None
    if ends_after is not None:
        start, after = None, barrier_watermark(store, store.get(ends_after))
    sources = kafka_sources(spec, store) if kafka is None else kafka
    ranges, first = plan_kafka_reads(sources, checkpoint_id, start=start,
                                     since=since if ends_after is None else None, before=watermark)
    if first is not None and (start is None or first > start):
        start = min(first, watermark)
    paths = [spark_path(sink.path, p.key) for p in committed_parts(sink.path)] + held.files
    report = compare_output(spark, spec, paths, checkpoint_id=checkpoint_id, watermark=watermark, start=start,
                            end=watermark, tag=tag, spec_path=spec_path, recompute=recompute, ends_after=after,
                            kafka=ranges)
    report.held_epochs = held.epochs
    store.objects.put_bytes(report_key, json.dumps(report.as_dict(), indent=2, default=str).encode())
    log.info("held output up to checkpoint %d (epochs %s): %s", checkpoint_id, held.epochs, report.message())
    return report, held


def compare_output(spark: SparkSession, spec: StageSpec, paths: list[str], *, checkpoint_id: int,
                   watermark: datetime, start: datetime | None, end: datetime, tag: str, spec_path: str,
                   recompute: Recomputation | None, ends_after: datetime | None = None,
                   kafka: dict[str, KafkaRanges] | None = None) -> RecomputeReport:
    """Compare the output rows in the Parquet files ``paths`` (none: no rows) with the batch
    recomputation, both restricted to the windows in ``[start, end)`` (module docstring) and,
    with ``ends_after``, to those that end after it; the report is returned, not stored. Only the
    differences (at most :data:`MAX_LISTED`) reach the driver. ``kafka``: the offset ranges of
    each Kafka-fed source stage (``""``: the spec's own source) to read again."""
    from pyspark.sql import functions as F

    settings = spec.batch
    ids = [*settings.window_columns, *settings.keys]
    measures = list(settings.measures)

    if recompute is None:
        transform = load_transformation(spec, spec_path)
        recomputed = transform(source_records(spark, spec, start, end, (kafka or {}).get("")),
                               TransformContext(spec, dict(spec.transformation.options)))
    else:
        recomputed = recompute(start, end, dict(kafka or {}))
    output = spark.read.parquet(*paths) if paths else spark.createDataFrame([], recomputed.schema)
    missing_columns = [c for c in ids + measures if c not in output.columns or c not in recomputed.columns]
    if missing_columns:
        raise OutputColumnsError(
            f"pipeline {spec.name!r}: output columns {missing_columns} (batch.window_columns, batch.keys, "
            "batch.measures of the spec) are not in the output; set them in the spec")
    stream = _in_range(output, spec, start, end, ends_after)
    batch = _in_range(recomputed, spec, start, end, ends_after)

    def shown(df: DataFrame) -> DataFrame:
        return df.select(*[F.date_format(c, _ISO).alias(c) if dict(df.dtypes)[c].startswith("timestamp")
                           else F.col(c) for c in ids], *measures)

    # Each side is computed once (the batch side re-reads the source through a Python data source):
    # the counts, the comparison and the listing below reuse it. The caches are dropped at the end:
    # Spark reuses a cached plan for any later identical plan, so a second comparison in the same
    # session (the output altered meanwhile) would otherwise compare the first one's rows.
    stream, batch = stream.cache(), batch.cache()
    differing = None
    try:
        stream_rows, batch_rows = stream.count(), batch.count()
        s = (shown(stream).groupBy(*ids)
             .agg(F.count(F.lit(1)).alias("_n"), F.collect_list(F.struct(*measures)).alias("_stream")))
        b = shown(batch).select(*ids, F.struct(*measures).alias("_batch"))
        joined = s.join(b, ids, "full_outer")
        differing = joined.filter(F.col("_n").isNull() | F.col("_batch").isNull() | (F.col("_n") > 1)
                                  | (F.to_json(F.col("_stream")[0]) != F.to_json(F.col("_batch"))))
        differing = differing.cache()
        total = differing.count()
        listed = []
        for row in differing.orderBy(*ids).limit(MAX_LISTED).collect():
            record = row.asDict(recursive=True)
            stream_values = [_plain(v) for v in (record["_stream"] or [])]
            batch_value = _plain(record["_batch"]) if record["_batch"] is not None else None
            kind = ("missing" if not stream_values else "extra" if batch_value is None
                    else "duplicated" if len(stream_values) > 1 else "changed")
            listed.append(Difference(kind, {c: record[c] for c in settings.window_columns},
                                     {c: record[c] for c in settings.keys}, stream_values, batch_value))
    finally:
        for cached in (stream, batch, differing):
            if cached is not None:
                cached.unpersist()
    return RecomputeReport(
        pipeline=spec.name, checkpoint_id=checkpoint_id, watermark=watermark.isoformat(),
        start=start.isoformat() if start else None, end=end.isoformat(), stream_rows=stream_rows,
        batch_rows=batch_rows, differences=listed, difference_count=total, tag=tag,
        ends_after=ends_after.isoformat() if ends_after else None,
        source_ranges={(stage or r.source): {"source": r.source, "from": r.origin,
                                             "ranges": {k: list(v) for k, v in r.ranges.items()}}
                       for stage, r in (kafka or {}).items()})
