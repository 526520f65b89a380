"""The Parquet file sink: staged per micro-batch, published when the checkpoint covering
the batch completes.

Spark 4.2's Python streaming writers accept only append mode, so the query writes through
``foreachBatch`` (:class:`ParquetBatchStager`), which hands each micro-batch to the batch
writer ``format("barrierflow_parquet")`` with its batch id: one code path for append,
update and complete modes. ``foreachBatch`` runs again with the same batch id when Spark
replays a batch, which rewrites that batch's staging list.

Layout under the sink's ``path`` (local ``file://`` or ``s3://``)::

    part-<batch:012d>-<n:05d>.parquet          published (committed) output
    _staging/batch=<batch:012d>/<task>-<uuid>.parquet   written by executors (invisible)
    _staging/batch=<batch:012d>/_PRECOMMITTED.json      the batch's file list (pre-commit)

Protocol:

1. ``write`` (executor, per task of the micro-batch) writes one Parquet file into the batch's staging prefix
   and returns its key and row count.
2. ``commit(messages)`` (driver, still inside the micro-batch) writes ``_PRECOMMITTED.json`` listing exactly the
   files of the successful tasks: the batch is durable but invisible. A replayed batch
   rewrites the list.
3. ``abort(messages)`` removes the batch's staging prefix (failed tasks appear as None
   in ``messages``, so the whole prefix goes).
4. :class:`ParquetSinkCommitter.notify_checkpoint_complete` (coordinator, after manifest n
   is stored) publishes every pre-committed batch <= V_n: each listed file moves to its
   deterministic final name ``part-<batch>-<n>.parquet`` (so a repeat is a no-op), leftovers
   of failed attempts are deleted, and the list goes last.

Readers only ever see ``part-*.parquet`` in the root; names starting with ``_`` are ignored
by Spark and pyarrow.
"""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceWriter, WriterCommitMessage

from barrierflow.errors import SinkError
from barrierflow.sinks.committer import SinkCommitter
from barrierflow.storage import ObjectNotFoundError, ObjectStore, open_store

log = logging.getLogger(__name__)
STAGING = "_staging"
MARKER = "_PRECOMMITTED.json"
_BATCH = re.compile(r"^_staging/batch=(\d+)/_PRECOMMITTED\.json$")


def batch_prefix(batch_id: int) -> str:
    return f"{STAGING}/batch={batch_id:012d}/"


def final_key(batch_id: int, index: int) -> str:
    return f"part-{batch_id:012d}-{index:05d}.parquet"


@dataclass
class StagedParquet(WriterCommitMessage):
    key: str | None
    rows: int


class ParquetSinkDataSource(DataSource):
    """Batch writer; options ``path`` (storage URI) and ``batch_id`` (the micro-batch)."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_parquet"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        try:
            return ParquetBatchWriter(self.options["path"], int(self.options["batch_id"]))
        except (KeyError, ValueError) as exc:
            raise SinkError("barrierflow_parquet needs the options 'path' and 'batch_id'; it is driven "
                            "by ParquetBatchStager inside foreachBatch") from exc


class ParquetBatchWriter(DataSourceArrowWriter):
    def __init__(self, uri: str, batch_id: int) -> None:
        self.uri = uri
        self.batch_id = batch_id

    def write(self, iterator: Iterator[Any]) -> StagedParquet:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return StagedParquet(None, 0)
        table = pa.Table.from_batches(batches)
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd")
        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        key = f"{batch_prefix(self.batch_id)}{task:05d}-{uuid.uuid4().hex}.parquet"
        open_store(self.uri).put_bytes(key, buffer.getvalue())
        return StagedParquet(key, table.num_rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Pre-commit: record exactly the successful tasks' files (durable, invisible)."""
        files = sorted(
            ({"key": m.key, "rows": m.rows} for m in messages if isinstance(m, StagedParquet) and m.key),
            key=lambda f: f["key"],
        )
        body = {"batch_id": self.batch_id, "files": files, "rows": sum(f["rows"] for f in files)}
        open_store(self.uri).put_bytes(batch_prefix(self.batch_id) + MARKER, json.dumps(body).encode())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        store = open_store(self.uri)
        store.delete_many([o.key for o in store.list(batch_prefix(self.batch_id))])


class ParquetBatchStager:
    """The ``foreachBatch`` function: stage micro-batch ``batch_id`` of ``df``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __call__(self, df: Any, batch_id: int) -> None:
        (df.write.format("barrierflow_parquet").mode("append")
         .option("path", self.uri).option("batch_id", str(batch_id)).save())


class ParquetSinkCommitter(SinkCommitter):
    """Publishes pre-committed batches when their checkpoint completes (idempotent)."""

    def __init__(self, name: str, uri: str, store: ObjectStore | None = None) -> None:
        self.name = name
        self.uri = uri
        self.store = store or open_store(uri)

    def precommitted_batches(self) -> list[int]:
        return sorted(int(m.group(1)) for o in self.store.list(STAGING + "/")
                      if (m := _BATCH.match(o.key)))

    def pre_commit_handles(self, barrier_batch: int) -> list[dict[str, Any]]:
        batches = [b for b in self.precommitted_batches() if b <= barrier_batch]
        return [{"sink": self.name, "type": "parquet", "uri": self.uri, "batches": batches}] if batches else []

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        for batch in self.precommitted_batches():
            if batch <= barrier_batch:
                self.publish(batch)

    def publish(self, batch_id: int) -> int:
        """Make batch ``batch_id`` visible; returns rows published (0 if already done)."""
        prefix = batch_prefix(batch_id)
        try:
            body = json.loads(self.store.get_bytes(prefix + MARKER))
        except ObjectNotFoundError:
            return 0
        for index, entry in enumerate(body["files"]):
            target = final_key(batch_id, index)
            if self.store.exists(entry["key"]):
                self.store.move(entry["key"], target)
            elif not self.store.exists(target):
                raise SinkError(
                    f"staged file {self.store.describe(entry['key'])} of batch {batch_id} is missing and "
                    f"was never published to {self.store.describe(target)}; the batch's output is lost "
                    "unless the job is restored from a checkpoint before it"
                )
        leftovers = [o.key for o in self.store.list(prefix) if not o.key.endswith(MARKER)]
        self.store.delete_many(leftovers)
        self.store.delete(prefix + MARKER)
        return int(body["rows"])

    def abort_after(self, barrier_batch: int) -> list[int]:
        """Delete staged batches newer than ``barrier_batch`` (they will be replayed)."""
        aborted = []
        for o in self.store.list(STAGING + "/"):
            match = re.match(r"^_staging/batch=(\d+)/", o.key)
            if match and int(match.group(1)) > barrier_batch:
                self.store.delete(o.key)
                aborted.append(int(match.group(1)))
        return sorted(set(aborted))


def read_committed(uri: str) -> Any:
    """The committed output as one pyarrow Table (readers never see staged files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = open_store(uri)
    tables = [pq.read_table(io.BytesIO(store.get_bytes(o.key)))
              for o in store.list("part-") if o.key.endswith(".parquet")]
    return pa.concat_tables(tables) if tables else None
