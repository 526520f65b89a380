"""The Delta Lake sink: one table version per completed checkpoint, committed with the
``deltalake`` package (delta-rs) from the driver, without a JVM and without rewriting data.

Spark writes the epoch's Parquet files ahead, inside the table's root
(``_barrierflow_staging/...``, :mod:`barrierflow.sinks.table`); the commit renames them into the
table and writes one Delta commit of their ``add`` actions (``create_write_transaction``) with a
transaction identifier, ``txnAppId`` = ``<pipeline>/<stage>/<sink>`` and ``txnVersion`` = the
checkpoint id, plus the ``barrierflow.*`` properties in its commit info.

Idempotence: the table's transaction version for the app id is the largest committed
checkpoint id. The commit reads it from the very table snapshot it commits against and skips an
epoch at or below it; a commit of the same app id that lands after that snapshot makes Delta
refuse this one (``ConcurrentTransaction``), after which the sink reads the table again and finds
the epoch committed. (Spark's Delta writer skips on ``txnVersion`` the same way, but it writes
the data itself: committing files Spark already wrote ahead through it would write every row
twice.)

With ``partitioned_by`` each write-ahead file holds one value of each partition column (split by
the write-ahead writer) and is published under ``<column>=<value>/``; its ``add`` action carries
the values.

The sink keeps its table open between checkpoints: each commit brings it up to the table's
latest version by reading only the log entries added since (``update_incremental``: what a
fresh open would read, without replaying the whole log), and opens it afresh when that fails.
After a commit it finds the version it wrote in the log entry right after the version the commit
was based on (the ten newest entries when another writer committed in between).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError, UserInputError
from barrierflow.sinks.cut import TableVersion
from barrierflow.sinks.table import DataFile, TableSink
from barrierflow.spec.lakehouse import DeltaSinkSpec
from barrierflow.storage import ObjectNotFoundError
from barrierflow.transactions.ledger import Transaction

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

log = logging.getLogger(__name__)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def table_uri(location: str) -> str:
    """The URI delta-rs opens for a storage URI (a local ``file://`` path as a plain path)."""
    return location[len("file://"):] if location.startswith("file://") else location


def _type_name(delta_type: Any) -> str:
    """A Delta type as the log names it (``long``, ``string``; nested types as their JSON)."""
    name = getattr(delta_type, "type", None)
    return name if isinstance(name, str) else str(delta_type)


def check_delta_table(spec: DeltaSinkSpec, output: pa.Schema) -> None:
    """Check ``output`` (the query's output schema) against the table at ``spec.path`` when it
    exists (a table that does not is created by the first commit, from its files' schema).

    Raises:
        UserInputError: an output column is not in the table or has another type (naming it),
            ``partitioned_by`` differs from the table's partition columns, or a ``partitioned_by``
            column is not in the output.
    """
    from deltalake import DeltaTable, Schema
    from deltalake.exceptions import TableNotFoundError

    where = f"sink {spec.name!r} (delta table {spec.path})"
    missing = [c for c in spec.partitioned_by if c not in output.names]
    if missing:
        raise UserInputError(f"{where}: partitioned_by column(s) {', '.join(missing)} are not in the output "
                             f"(its columns: {', '.join(output.names)})")
    try:
        table = DeltaTable(table_uri(spec.path))
    except TableNotFoundError:
        return
    fields = {f.name: f.type for f in table.schema().fields}
    for field in Schema.from_arrow(output).fields:
        if field.name not in fields:
            raise UserInputError(f"{where}: output column {field.name!r} is not a column of the table (its "
                                 f"columns: {', '.join(fields)}); add it to the table or drop it from the output")
        if str(field.type) != str(fields[field.name]):
            raise UserInputError(f"{where}: output column {field.name!r} is {_type_name(field.type)} but the table's "
                                 f"column is {_type_name(fields[field.name])}; cast it in the transformation or change "
                                 "the table")
    partitions = list(table.metadata().partition_columns)
    if spec.partitioned_by and partitions != spec.partitioned_by:
        raise UserInputError(f"{where}: partitioned_by {spec.partitioned_by} differs from the table's "
                             f"partition columns {partitions}")


class DeltaSink(TableSink):
    """Appends each checkpoint's rows to the Delta table at ``spec.path`` in one version."""

    sink_type = "delta"

    def __init__(self, *, spec: DeltaSinkSpec, **kwargs: Any) -> None:
        self.spec = spec
        #: The table as this sink last opened it (None: not yet, or no table then).
        self._table: DeltaTable | None = None
        super().__init__(location=spec.path, **kwargs)

    def describe_table(self) -> str:
        return f"delta table {self.spec.path}"

    def _load(self) -> DeltaTable | None:
        """The table at its latest version (module docstring); None when there is no table."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if self._table is not None:
            try:
                self._table.update_incremental()
                return self._table
            except Exception as exc:  # the log it would read on from is gone (cleaned up, table replaced)
                log.info("sink %s: %s opened afresh (%s: %s)", self.name, self.describe_table(), type(exc).__name__,
                         exc)
                self._table = None
        try:
            self._table = DeltaTable(table_uri(self.location))
        except TableNotFoundError:
            return None
        return self._table

    def load(self) -> DeltaTable | None:
        return self._load()

    def committed_checkpoint(self, table: Any = None) -> int | None:
        table = table if table is not None else self._load()
        return None if table is None else table.transaction_version(self.app_id)

    def version_at(self, checkpoint_id: int) -> TableVersion | None:
        table = self._load()
        found = None
        if table is not None:
            latest = table.version()
            for index, info in enumerate(table.history()):  # newest first, one entry per version
                cid = self.is_ours(info)
                if cid is not None and cid <= checkpoint_id:
                    found = (latest - index, cid)
                    break
        return TableVersion("delta", self.spec.path, found[0] if found else None, found[1] if found else None, {})

    # -- partitions ------------------------------------------------------------------------
    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        handle = super().pre_commit(txn)
        if self.spec.partitioned_by:
            import io

            import pyarrow.parquet as pq

            prefix = self.write_ahead.uri[len(self.location) + 1:]
            for entries in handle["files"].values():
                for entry in entries:
                    data = pq.read_table(io.BytesIO(self.table_store.get_bytes(f"{prefix}/{entry['key']}")),
                                         columns=self.spec.partitioned_by).slice(0, 1).to_pylist()
                    row = data[0] if data else {}
                    entry["partition"] = {c: (None if row.get(c) is None else str(row[c]))
                                          for c in self.spec.partitioned_by}
        return handle

    def data_key(self, name: str, entry: dict[str, Any]) -> str:
        partition = entry.get("partition") or {}
        dirs = "/".join(f"{column}={NULL_PARTITION if value is None else urllib.parse.quote(value, safe='')}"
                        for column, value in partition.items())
        return f"{dirs}/{name}" if dirs else name

    # -- the commit ------------------------------------------------------------------------
    def commit_files(self, txn: Transaction, files: list[DataFile], table: Any) -> TableVersion | None:
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions
        from deltalake.transaction import Transaction as DeltaTxn

        now = int(time.time() * 1000)
        actions = []
        for f in files:
            size = self.table_store.size(f.key)
            if size is None:
                raise SinkError(f"sink {self.name!r}: data file {self.table_store.describe(f.key)} vanished before "
                                f"its commit; restore a checkpoint before checkpoint {txn.checkpoint_id}")
            actions.append(AddAction(urllib.parse.quote(f.key, safe="/="), size, self._partition_for_key(txn, f.key),
                                     now, True, json.dumps({"numRecords": f.rows})))
        props = CommitProperties(custom_metadata=self.commit_properties(txn),
                                 app_transactions=[DeltaTxn(self.app_id, txn.checkpoint_id, now)])
        try:
            if table is None:
                import io

                import pyarrow.parquet as pq

                schema = pq.read_schema(io.BytesIO(self.table_store.get_bytes(files[0].key)))
                create_table_with_add_actions(table_uri(self.location), Schema.from_arrow(schema), actions,
                                              mode="append", partition_by=self.spec.partitioned_by or None,
                                              commit_properties=props)
                return TableVersion("delta", self.spec.path, 0, txn.checkpoint_id, {})
            based_on = table.version()
            table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                           partition_by=list(table.metadata().partition_columns) or None,
                                           commit_properties=props)
        except CommitFailedError as exc:
            self.refused_commit(txn, exc)
            return None
        return self._written(table, txn.checkpoint_id, based_on)

    def _written(self, table: DeltaTable, checkpoint_id: int, based_on: int) -> TableVersion | None:
        """The version this sink's commit of ``checkpoint_id`` wrote (the commit was based on version
        ``based_on``): the next version when its log entry is this commit's (one small read: the
        table object stays where it was until the next checkpoint's load), else found among the
        newest entries of the log (the table brought up to date first); None if not among them."""
        try:
            entry = self.table_store.get_bytes(f"_delta_log/{based_on + 1:020d}.json")
        except ObjectNotFoundError:
            entry = b""
        for line in entry.decode("utf-8").splitlines():
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is not None and self.is_ours(info) == checkpoint_id:
                return TableVersion("delta", self.spec.path, based_on + 1, checkpoint_id, {})
        table.update_incremental()
        latest = table.version()
        for limit in (1, 10):  # the newest entry is this commit's unless another writer committed since
            for index, info in enumerate(table.history(limit=limit)):  # newest first
                if self.is_ours(info) == checkpoint_id:
                    return TableVersion("delta", self.spec.path, latest - index, checkpoint_id, {})
        return None

    def _partition_for_key(self, txn: Transaction, key: str) -> dict[str, str | None]:
        if not self.spec.partitioned_by:
            return {}
        parts = key.split("/")[:-1]
        return {p.split("=", 1)[0]: (None if p.split("=", 1)[1] == NULL_PARTITION
                                     else urllib.parse.unquote(p.split("=", 1)[1])) for p in parts}
