"""Writing micro-batches ahead: the Spark side of every barrierflow sink.

Spark 4.2's Python streaming writers accept only append mode, so queries write through
``foreachBatch`` (:class:`WriteAheadWriter`), which hands each micro-batch, with its id, to the
batch writer ``format("barrierflow_staging")``: one code path for append, update and complete
modes. Layout under a write-ahead URI (the sink's write-ahead area; local ``file://`` or ``s3://``)::

    batch=<batch:012d>/<task:05d>-<uuid>.parquet   one file per task (invisible to readers)
    batch=<batch:012d>/_PRECOMMITTED.json          the batch's file list (and the writer's
                                                   fencing number), written last

Protocol per micro-batch V:

1. ``write`` (executor, per task) writes one Parquet file and returns its key and row count.
2. ``commit(messages)`` (driver, before Spark writes ``commits/V``) writes ``_PRECOMMITTED.json``
   listing exactly the successful tasks' files: the batch is durable but invisible.
   ``foreachBatch`` runs again with the same id when Spark replays V, which rewrites the list.
3. ``abort(messages)`` removes the batch's prefix (failed tasks appear as None in messages).

The layout's names and the driver-side reading of write-ahead batches live in
:mod:`barrierflow.transactions.write_ahead`, below the sinks. Sinks then turn write-ahead batches into
their external effect per epoch (two-phase commit,
:mod:`barrierflow.transactions.two_phase`): publish files, ``COMMIT PREPARED``, produce a Kafka
transaction. Write-ahead data is deleted only after the batch's transaction committed, or when a
restore discards batches newer than the restored checkpoint (they will be replayed).
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage

from barrierflow.barriers.control import ControlChannel
from barrierflow.errors import SinkError
from barrierflow.faults import crash_point
from barrierflow.lease import FenceToken
from barrierflow.sinks.copy_rows import row_count
from barrierflow.spark import offset_log
from barrierflow.storage import open_store
from barrierflow.transactions.write_ahead import MARKER, batch_prefix

log = logging.getLogger(__name__)


@dataclass
class WriteAheadFile(WriterCommitMessage):
    """What a task's ``write`` reports to the driver's ``commit``: the key of the Parquet file it
    wrote under the write-ahead URI (None when the task had no rows) and its row count. The file is
    invisible until ``commit`` lists it in the batch's ``_PRECOMMITTED.json``."""

    key: str | None
    rows: int


@dataclass(frozen=True)
class KafkaRecords:
    """A Kafka sink's micro-batches are written ahead as its records (key and value bytes,
    :func:`~barrierflow.sinks.json_rows.encoded_records`) instead of rows: ``sink`` names the
    sink in errors, ``key_column`` is its key column (None: records without a key)."""

    sink: str
    key_column: str | None

    def options(self) -> dict[str, str]:
        """The writer options that carry it (:func:`records_from_options` reads them back)."""
        return {"records": "kafka", "records_sink": self.sink, "kafka_key_column": self.key_column or ""}

    def check_columns(self, columns: list[str]) -> None:
        """Raises :class:`SinkError` naming the sink, ``key_column`` and the fix when the query's
        output (``columns``) lacks the key column."""
        if self.key_column is not None and self.key_column not in columns:
            raise SinkError(f"Kafka sink {self.sink!r}: key_column {self.key_column!r} is not a column of the rows "
                            f"the query wrote (columns: {columns}); fix key_column in the pipeline spec or the query")

    def encode(self, table: Any) -> Any:
        from barrierflow.sinks.json_rows import encoded_records

        return encoded_records(table, self.key_column, sink=self.sink, where="the rows the query wrote")


@dataclass(frozen=True)
class CopyRows:
    """A PostgreSQL sink's micro-batches (insert mode) are written ahead as its ``COPY`` input
    (:func:`~barrierflow.sinks.copy_rows.encoded_copy_rows`) when every column's type allows it
    (:func:`~barrierflow.sinks.copy_rows.encodable`), otherwise as rows; ``sink`` names the sink."""

    sink: str

    def options(self) -> dict[str, str]:
        """The writer options that carry it (:func:`records_from_options` reads them back)."""
        return {"records": "postgres-copy", "records_sink": self.sink}

    def check_columns(self, columns: list[str]) -> None:
        """Any columns will do: the pre-commit checks them against the table."""

    def encode(self, table: Any) -> Any:
        from barrierflow.sinks.copy_rows import encodable, encoded_copy_rows

        return encoded_copy_rows(table) if encodable(table.schema) else table


#: How a sink's micro-batches are written ahead when not as the query's rows.
SinkRecords = KafkaRecords | CopyRows


def records_from_options(options: Any) -> SinkRecords | None:
    """The :class:`SinkRecords` whose ``options()`` are among ``options``; None for rows."""
    kind, sink = options.get("records", ""), options.get("records_sink", "")
    if kind == "kafka":
        return KafkaRecords(sink, options.get("kafka_key_column", "") or None)
    if kind == "postgres-copy":
        return CopyRows(sink)
    return None


class WriteAheadDataSource(DataSource):
    """Batch writer; options ``uri`` (write-ahead URI) and ``batch_id`` (the micro-batch)."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_staging"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()  # Spark calls this in a reused planning worker, once per micro-batch
        try:
            fence = self.options.get("fence")
            split = [c for c in self.options.get("split_by", "").split(",") if c]
            records = records_from_options(self.options)
            return WriteAheadBatchWriter(self.options["uri"], int(self.options["batch_id"]),
                                         int(fence) if fence else None, split, records)
        except (KeyError, ValueError) as exc:
            raise SinkError("barrierflow_staging needs the options 'uri' and 'batch_id'; it is driven by "
                            "WriteAheadWriter inside foreachBatch") from exc


@dataclass
class WriteAheadFiles(WriterCommitMessage):
    """What a task's ``write`` reports when it splits its rows by column values (``split_by``):
    one :class:`WriteAheadFile` per distinct value combination."""

    files: list[WriteAheadFile]


def split_by_values(table: Any, columns: list[str]) -> list[Any]:
    """``table`` split into one table per distinct combination of ``columns``' values (nulls
    form their own group), so each part holds exactly one value per column: what a table
    format's identity partition needs of a data file."""
    import pyarrow.compute as pc

    if not columns:
        return [table]
    parts = []
    for values in table.select(columns).group_by(columns, use_threads=False).aggregate([]).to_pylist():
        mask = None
        for column in columns:
            value = values[column]
            hit = pc.is_null(table[column]) if value is None else pc.fill_null(pc.equal(table[column], value), False)
            mask = hit if mask is None else pc.and_(mask, hit)
        parts.append(table.filter(mask))
    return parts


class WriteAheadBatchWriter(DataSourceArrowWriter):
    """Writes each task's rows as one Parquet file, or, with ``split_by`` columns, one file per
    distinct combination of their values (the identity partitions of a table sink)."""

    def __init__(self, uri: str, batch_id: int, fence: int | None = None, split_by: list[str] | None = None,
                 records: SinkRecords | None = None) -> None:
        self.uri = uri
        self.batch_id = batch_id
        self.fence = fence
        self.split_by = list(split_by or [])
        self.records = records

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()
        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return WriteAheadFile(None, 0)
        table = pa.Table.from_batches(batches)
        if self.records is not None:
            table = self.records.encode(table)
        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        store = open_store(self.uri)
        written = []
        for part in split_by_values(table, self.split_by):
            buffer = io.BytesIO()
            pq.write_table(part, buffer, compression="zstd")
            key = f"{batch_prefix(self.batch_id)}{task:05d}-{uuid.uuid4().hex}.parquet"
            store.put_bytes(key, buffer.getvalue())
            written.append(WriteAheadFile(key, row_count(part)))
        return written[0] if len(written) == 1 and not self.split_by else WriteAheadFiles(written)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()  # Spark calls this in a reused commit worker, once per micro-batch
        reported = [f for m in messages if m is not None
                    for f in (m.files if isinstance(m, WriteAheadFiles) else [m])]
        files = sorted(
            ({"key": m.key, "rows": m.rows} for m in reported if isinstance(m, WriteAheadFile) and m.key),
            key=lambda f: f["key"],
        )
        body = {"batch_id": self.batch_id, "files": files, "rows": sum(f["rows"] for f in files), "fence": self.fence}
        open_store(self.uri).put_bytes(batch_prefix(self.batch_id) + MARKER, json.dumps(body).encode())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()
        store = open_store(self.uri)
        store.delete_many([o.key for o in store.list(batch_prefix(self.batch_id))])


def write_ahead_batch(uri: str, batch_id: int, table: Any, fence: int | None = None,
                      split_by: list[str] | None = None) -> None:
    """Stage a pyarrow ``table`` as micro-batch ``batch_id`` from the driver (one file, or one per
    distinct value combination of ``split_by``; then the file list, with the writer's fencing
    number), in the same layout the executor-side writer produces."""
    import pyarrow.parquet as pq

    store = open_store(uri)
    files = []
    if table.num_rows:
        for part in split_by_values(table, list(split_by or [])):
            buffer = io.BytesIO()
            pq.write_table(part, buffer, compression="zstd")
            key = f"{batch_prefix(batch_id)}driver-{uuid.uuid4().hex}.parquet"
            store.put_bytes(key, buffer.getvalue())
            files.append({"key": key, "rows": row_count(part)})
    body = {"batch_id": batch_id, "files": files, "rows": sum(f["rows"] for f in files), "fence": fence}
    store.put_bytes(batch_prefix(batch_id) + MARKER, json.dumps(body).encode())


class WriteAheadWriter:
    """The ``foreachBatch`` function: write micro-batch ``batch_id`` of ``df`` ahead under ``uri``.

    ``mode="executors"`` writes one Parquet file per task through ``barrierflow_staging``
    (scales with the cluster); ``mode="driver"`` collects the batch to the driver as Arrow
    and writes one file (no extra Python worker per batch: cheaper for the small outputs of
    aggregations). Both produce the same layout.

    With ``control_dir`` and ``spark_checkpoint`` given, a batch that replays output already
    committed (the restore left a replay plan, see :mod:`barrierflow.barriers.replay_plan`) is not
    written ahead: it is evaluated into Spark's ``noop`` sink (the stateful operators must still run
    and commit their state for the batch) and its output is dropped; ``suppressed`` lists it."""

    def __init__(self, uri: str, mode: str = "executors", *, control_dir: str | None = None,
                 spark_checkpoint: str | None = None, fence: FenceToken | None = None,
                 split_by: list[str] | None = None, records: SinkRecords | None = None) -> None:
        if mode not in ("executors", "driver"):
            raise SinkError(f"write-ahead mode must be 'executors' or 'driver', got {mode!r}")
        self.uri = uri
        self.mode = mode
        self.control_dir = control_dir
        self.spark_checkpoint = spark_checkpoint
        self.suppressed: list[int] = []
        #: The lease holder's fencing token: a driver whose lease was taken over writes nothing ahead.
        self.fence = fence
        #: Columns whose value combinations get files of their own (a table sink's identity partitions).
        self.split_by = list(split_by or [])
        #: A Kafka or PostgreSQL sink's batches are written ahead as its records (:data:`SinkRecords`).
        self.records = records

    def replays_committed_output(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` re-produces output a sink already committed."""
        if self.control_dir is None or self.spark_checkpoint is None:
            return False
        plan = ControlChannel(self.control_dir).replay_plan()
        if plan is None:
            return False
        spark_dir = self.spark_checkpoint

        def partitions(batch: int) -> dict[str, int]:
            return offset_log.first_source_partitions(spark_dir, batch) or {}

        return plan.covers(partitions(batch_id - 1), partitions(batch_id))

    def __call__(self, df: Any, batch_id: int) -> None:
        crash_point("mid_epoch", batch_id=batch_id)
        if self.fence is not None:  # no store request per batch while the heartbeat confirms the lease
            self.fence.check_recent(f"writing ahead micro-batch {batch_id}")
        if self.replays_committed_output(batch_id):
            df.write.format("noop").mode("overwrite").save()
            self.suppressed.append(batch_id)
            log.info("batch %d replays output already committed before the restore: not written ahead", batch_id)
            return
        if self.records is not None:  # schema only: refused before any row is written
            self.records.check_columns(list(df.columns))
        fence = self.fence.fence if self.fence is not None else None
        if self.mode == "driver":
            table = df.toArrow()
            write_ahead_batch(self.uri, batch_id, self.records.encode(table) if self.records else table, fence,
                              self.split_by)
            return
        (df.write.format("barrierflow_staging").mode("append")
         .option("uri", self.uri).option("batch_id", str(batch_id)).option("fence", str(fence or ""))
         .option("split_by", ",".join(self.split_by))
         .options(**(self.records.options() if self.records else {})).save())


class WriteAheadWriters:
    """The ``foreachBatch`` function of a stage with several sinks: micro-batch ``batch_id`` is
    written ahead once per sink, by each sink's :class:`WriteAheadWriter` in order, so every
    sink pre-commits the same rows for the epoch and commits them under the same checkpoint id.

    The batch's DataFrame is persisted for the writes and unpersisted after: every sink gets the
    rows of one evaluation (the stateful operators of the micro-batch run once; a second
    evaluation would recompute them). A crash between two sinks' writes leaves the batch written
    ahead for some sinks only; Spark then has not committed the batch and runs it again, and each
    sink's write rewrites its own file list (``_PRECOMMITTED.json``), so no sink keeps a partial or
    doubled batch."""

    def __init__(self, writers: list[WriteAheadWriter]) -> None:
        if len(writers) < 2:
            raise SinkError("WriteAheadWriters is for a stage with several sinks; use its one WriteAheadWriter")
        self.writers = list(writers)

    @property
    def suppressed(self) -> list[int]:
        """The batches whose output was not written ahead (they replay committed output)."""
        return self.writers[0].suppressed

    def __call__(self, df: Any, batch_id: int) -> None:
        df.persist()
        try:
            for writer in self.writers:
                writer(df, batch_id)
        finally:
            df.unpersist()
