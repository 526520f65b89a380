"""The Apache Iceberg sink: one snapshot per completed checkpoint, through pyiceberg.

There is no Iceberg Spark runtime for Spark 4.2, so Spark only writes Parquet files (ahead, per
micro-batch, :mod:`barrierflow.sinks.write_ahead`) and the driver commits them with pyiceberg's
``add_files``: one ``append`` snapshot per checkpoint whose summary carries
``barrierflow.pipeline``, ``barrierflow.stage``, ``barrierflow.sink``,
``barrierflow.checkpoint-id`` and ``barrierflow.attempt``. The protocol and the restore rule are
:mod:`barrierflow.sinks.table`'s; the table's record of what it holds is the largest
``barrierflow.checkpoint-id`` of this pipeline, stage and sink along the current snapshot's
ancestry.

The table is created when absent, from the query's output schema (every column optional),
partitioned by identity on ``partitioned_by``, at ``<warehouse>/<namespace>/<table>``; a table
that exists must take the output as it is: each output column must exist in the table with the
same type (int -> long and float -> double are allowed widenings), and every required table
column must be in the output. With ``partitioned_by`` the write-ahead files hold one partition
value each (``add_files`` derives a file's partition from its column statistics).

What a commit reads, and what it keeps between checkpoints (a table's snapshot list grows by one
per checkpoint, so whatever is done per snapshot grows with the table's age):

* the SQL catalog (:class:`~barrierflow.sinks.iceberg_reads.MetadataCachingSqlCatalog`) keeps
  the few newest table metadata it parsed, by metadata file location. Loading a table still asks
  the catalog for its current metadata location every time (one query), and reads and parses
  the file only when the location is new: a metadata file is never rewritten (each commit writes
  a new one), so this is exactly what reading it again would give, and a commit of any other
  writer moves the location. The commit's own compare-and-swap on the location is unchanged: a
  concurrent writer's commit still makes it refuse;
* the commit's transaction (:class:`~barrierflow.sinks.iceberg_reads.MetadataOnceTransaction`)
  works out the metadata its staged changes lead to once per change, not at each of the dozen
  reads ``add_files`` makes of it (pyiceberg deep-copies the whole metadata at each);
* the sink's history walk indexes the snapshots once instead of searching the list per parent.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError, UserInputError
from barrierflow.sinks.cut import TableVersion
from barrierflow.sinks.table import DataFile, TableSink
from barrierflow.spec.lakehouse import IcebergCatalogSpec, IcebergSinkSpec
from barrierflow.transactions.ledger import Transaction

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

def catalog_uri(spec: IcebergCatalogSpec, work_dir: str | os.PathLike[str]) -> str:
    """The catalog's URI: ``uri``, the value of ``uri_env``, or (SQL, neither given) the SQLite
    file ``<work_dir>/iceberg/catalog.db``."""
    if spec.uri_env:
        value = os.environ.get(spec.uri_env, "").strip()
        if not value:
            raise SinkError(f"iceberg catalog: the environment variable {spec.uri_env} (catalog.uri_env) is not set; "
                            "set it to the catalog's URI, e.g. postgresql+psycopg2://USER:PASSWORD@HOST:5432/DB")
        return value
    if spec.uri:
        return spec.uri
    path = Path(work_dir) / "iceberg" / "catalog.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def warehouse_uri(spec: IcebergCatalogSpec, work_dir: str | os.PathLike[str]) -> str:
    return spec.warehouse or f"file://{Path(work_dir).resolve() / 'iceberg' / 'warehouse'}"


def open_catalog(spec: IcebergCatalogSpec, work_dir: str | os.PathLike[str]) -> Catalog:
    """The pyiceberg catalog ``spec`` names (SQL on SQLite or PostgreSQL, or REST)."""
    uri = catalog_uri(spec, work_dir)
    props = {"uri": uri, "warehouse": warehouse_uri(spec, work_dir), **spec.properties}
    if spec.type == "sql":
        from barrierflow.sinks.iceberg_reads import MetadataCachingSqlCatalog

        return MetadataCachingSqlCatalog(spec.name, **props)
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(spec.name, **props)


def iceberg_types(schema: pa.Schema) -> dict[str, Any]:
    """The Iceberg type of each top-level column of an Arrow schema."""
    from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids

    return {f.name: f.field_type for f in _pyarrow_to_schema_without_ids(schema).fields}


_WIDENINGS = {("int", "long"), ("float", "double")}


def schema_problem(table: Table, output: pa.Schema, where: str) -> str | None:
    """Why ``output`` (the query's output schema) cannot be appended to ``table``, naming the
    column; None when it can."""
    fields = {f.name: f for f in table.schema().fields}
    for name, out_type in iceberg_types(output).items():
        field = fields.get(name)
        if field is None:
            return (f"{where}: output column {name!r} is not a column of the table (its columns: "
                    f"{', '.join(fields)}); add it to the table (schema evolution) or drop it from the output")
        if str(out_type) != str(field.field_type) and (str(out_type), str(field.field_type)) not in _WIDENINGS:
            return (f"{where}: output column {name!r} is {out_type} but the table's column {name!r} is "
                    f"{field.field_type}; cast it in the transformation or change the table")
    missing = [f.name for f in table.schema().fields if f.required and f.name not in output.names]
    if missing:
        return f"{where}: the table's required column(s) {', '.join(missing)} are not in the output"
    return None


def table_location(spec: IcebergSinkSpec, work_dir: str | os.PathLike[str], catalog: Catalog | None = None) -> str:
    """The location of the sink's table: the table's own when it exists, else where the sink
    creates it (``<warehouse>/<namespace>/<table>``)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    catalog = catalog or open_catalog(spec.catalog, work_dir)
    try:
        return str(catalog.load_table(spec.table).location())
    except (NoSuchTableError, NoSuchNamespaceError):
        return f"{warehouse_uri(spec.catalog, work_dir).rstrip('/')}/{spec.namespace}/{spec.table_name}"


def ensure_iceberg_table(spec: IcebergSinkSpec, catalog: Catalog, location: str, output: pa.Schema) -> Table:
    """The sink's table, created at ``location`` from ``output`` (the query's output schema)
    when absent (module docstring).

    Raises:
        UserInputError: the table exists and cannot take ``output`` (naming the column), or a
            ``partitioned_by`` column is not in the output.
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, TableAlreadyExistsError

    where = f"sink {spec.name!r} (iceberg table {spec.table})"
    try:
        table = catalog.load_table(spec.table)
    except (NoSuchTableError, NoSuchNamespaceError):
        table = None
    if table is not None:
        problem = schema_problem(table, output, where)
        if problem:
            raise UserInputError(problem)
        return table
    missing = [c for c in spec.partitioned_by if c not in output.names]
    if missing:
        raise UserInputError(f"{where}: partitioned_by column(s) {', '.join(missing)} are not in the output "
                             f"(its columns: {', '.join(output.names)})")
    try:
        catalog.create_namespace_if_not_exists(spec.namespace)
    except Exception:  # created meanwhile by another sink (the SQL catalog's insert then fails)
        if not catalog.namespace_exists(spec.namespace):
            raise
    try:
        table = catalog.create_table(spec.table, schema=output, location=location)
    except TableAlreadyExistsError:  # created meanwhile by another writer: check it like any other
        return ensure_iceberg_table(spec, catalog, location, output)
    if spec.partitioned_by:
        with table.update_spec() as update:
            for column in spec.partitioned_by:
                update.add_identity(column)
        table = catalog.load_table(spec.table)
    log.info("sink %s: created iceberg table %s at %s", spec.name, spec.table, location)
    return table


class IcebergSink(TableSink):
    """Appends each checkpoint's rows to ``spec.table`` in one snapshot (module docstring)."""

    sink_type = "iceberg"

    def __init__(self, *, spec: IcebergSinkSpec, work_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        self.spec = spec
        self.work_dir = work_dir
        self.catalog = open_catalog(spec.catalog, work_dir)
        super().__init__(location=table_location(spec, work_dir, self.catalog), **kwargs)

    def describe_table(self) -> str:
        return f"iceberg table {self.spec.table} (catalog {self.spec.catalog.name})"

    def _load(self) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.catalog.load_table(self.spec.table)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def ensure_table(self, output: pa.Schema) -> Table:
        """The table, created from ``output`` when absent (:func:`ensure_iceberg_table`)."""
        return ensure_iceberg_table(self.spec, self.catalog, self.location, output)

    def _history(self, table: Table) -> list[tuple[int, int]]:
        """(snapshot id, checkpoint id) of this sink's snapshots along the current ancestry, newest first."""
        by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
        out = []
        snapshot = table.current_snapshot()
        while snapshot is not None:
            cid = self.is_ours(snapshot.summary.additional_properties if snapshot.summary else {})
            if cid is not None:
                out.append((snapshot.snapshot_id, cid))
            parent = snapshot.parent_snapshot_id
            snapshot = by_id.get(parent) if parent is not None else None
        return out

    def load(self) -> Table | None:
        return self._load()

    def committed_checkpoint(self, table: Any = None) -> int | None:
        table = table if table is not None else self._load()
        if table is None:
            return None
        return max((cid for _sid, cid in self._history(table)), default=None)

    def version_at(self, checkpoint_id: int) -> TableVersion | None:
        table = self._load()
        found = next(((sid, cid) for sid, cid in self._history(table) if cid <= checkpoint_id), None) \
            if table is not None else None
        return TableVersion("iceberg", self.spec.table, found[0] if found else None, found[1] if found else None,
                            {"name": self.spec.catalog.name, "type": self.spec.catalog.type})

    def data_key(self, name: str, entry: dict[str, Any]) -> str:
        return f"data/{name}"

    def commit_files(self, txn: Transaction, files: list[DataFile], table: Any) -> TableVersion | None:
        """``add_files`` without pyiceberg's duplicate check (a scan of every data file the table
        references, growing with the table): the file names hold the checkpoint and attempt, and
        the table's own checkpoint record already decided that this epoch is not in it. When the
        catalog refuses the commit because another writer committed meanwhile, pyiceberg's retry
        on top of the new table state is made only while that state does not hold the checkpoint
        (another driver of this sink may have committed it): else nothing is written (None)."""
        from pyiceberg.exceptions import CommitFailedException

        from barrierflow.sinks.iceberg_reads import MetadataCachingSqlCatalog, MetadataOnceTransaction

        paths = [f"{self.location}/{f.key}" for f in files]
        if table is None:
            import pyarrow.parquet as pq

            with self.table_store_file(files[0].key) as handle:
                table = self.ensure_table(pq.read_schema(handle))
        def still_wanted(current: Table) -> bool:
            committed = self.committed_checkpoint(current)
            return committed is None or committed < txn.checkpoint_id

        try:
            with MetadataOnceTransaction(table, still_wanted=still_wanted) as transaction:  # table.add_files
                transaction.add_files(paths, snapshot_properties=self.commit_properties(txn),
                                      check_duplicate_files=False)
        except ValueError as exc:
            raise SinkError(f"sink {self.name!r}: {self.describe_table()} refused the files of checkpoint "
                            f"{txn.checkpoint_id}: {exc}") from exc
        except CommitFailedException as exc:
            self.refused_commit(txn, exc)
            return None
        if isinstance(self.catalog, MetadataCachingSqlCatalog):
            self.catalog.remember(table)
        snapshot = table.current_snapshot()  # the commit moved the table object to the new metadata
        return TableVersion("iceberg", self.spec.table, snapshot.snapshot_id if snapshot else None, txn.checkpoint_id,
                            {"name": self.spec.catalog.name, "type": self.spec.catalog.type})

    def table_store_file(self, key: str) -> Any:
        import io

        return io.BytesIO(self.table_store.get_bytes(key))
