"""What an Iceberg commit through pyiceberg reads, read less often (:mod:`barrierflow.sinks.iceberg`'s
module docstring says what is kept and why it stays correct). Imported only where a catalog is
opened or a commit made, like pyiceberg itself."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table import Transaction as IcebergTransaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import update_table_metadata

#: How many parsed table metadata a :class:`MetadataCachingSqlCatalog` keeps (the newest used).
METADATA_CACHE_SIZE = 8


class MetadataCachingSqlCatalog(SqlCatalog):
    """pyiceberg's SQL catalog that parses a table metadata file once (module docstring): the
    metadata of the :data:`METADATA_CACHE_SIZE` locations used last are kept, keyed by location.
    Correct because a metadata file is written once, under a new name, and never changed."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._parsed: OrderedDict[str, TableMetadata] = OrderedDict()
        self._parsed_lock = threading.Lock()

    def remember(self, table: Table) -> None:
        """Keep ``table``'s metadata under its location (the metadata a commit of this process
        just wrote: the next load of the table does not read it back)."""
        with self._parsed_lock:
            self._parsed[table.metadata_location] = table.metadata
            self._parsed.move_to_end(table.metadata_location)
            while len(self._parsed) > METADATA_CACHE_SIZE:
                self._parsed.popitem(last=False)

    def _convert_orm_to_iceberg(self, orm_table: Any) -> Table:
        """The table of a catalog row, its metadata parsed only when its location is new."""
        location = orm_table.metadata_location
        with self._parsed_lock:
            metadata = self._parsed.get(location) if location else None
        if metadata is None:
            table = super()._convert_orm_to_iceberg(orm_table)
            self.remember(table)
            return table
        with self._parsed_lock:
            self._parsed.move_to_end(location)
        return Table(identifier=(*Catalog.identifier_to_tuple(orm_table.table_namespace), orm_table.table_name),
                     metadata=metadata, metadata_location=location,
                     io=self._load_file_io(metadata.properties, location), catalog=self)


class MetadataOnceTransaction(IcebergTransaction):
    """pyiceberg's transaction whose ``table_metadata`` (the table's metadata with the staged
    changes applied, deep-copied by pyiceberg at every read) is worked out once per set of staged
    changes and base metadata; both are replaced, never changed in place, when they change. With
    nothing staged it is the table's own metadata (an immutable model: no copy is needed).

    ``still_wanted``: when the catalog refuses the commit (another writer moved the table),
    pyiceberg reloads the table and makes the same append again on top of it; this is asked
    first, with the reloaded table, and when it says no (the other writer's commit already holds
    what this one adds: another driver of the same sink committed the same checkpoint) the
    commit fails with :class:`CommitFailedException` instead of appending the files twice."""

    _memo: tuple[TableMetadata, tuple[Any, ...], TableMetadata] | None = None

    def __init__(self, table: Table, *, still_wanted: Callable[[Table], bool] | None = None) -> None:
        super().__init__(table)
        self._still_wanted = still_wanted

    def _rebuild_snapshot_updates(self) -> None:
        if self._still_wanted is not None and not self._still_wanted(self._table):
            raise CommitFailedException(f"table {'.'.join(self._table.name())} was committed to by another writer, "
                                        "whose commit holds what this one adds")
        super()._rebuild_snapshot_updates()

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        memo = self._memo
        if memo is None or memo[0] is not base or memo[1] is not updates:
            memo = (base, updates, update_table_metadata(base, updates) if updates else base)
            self._memo = memo
        return memo[2]
