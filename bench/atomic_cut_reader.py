"""A reader of an Iceberg SQL catalog on PostgreSQL that knows nothing of barrierflow.

It reads every table's row of ``iceberg_tables`` in one REPEATABLE READ transaction (one
consistent view of the catalog), then each table's metadata file with pyiceberg, and takes the
``barrierflow.checkpoint-id`` of each table's current snapshot summary. A read is *torn* when
two tables with a current snapshot name different checkpoint ids. Only psycopg and pyiceberg
are imported: nothing of barrierflow.

``tables`` limits a reader to some tables of the namespace (a catalog holding other tables too,
e.g. the reference copy's of a chaos run beside the copy under kills).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.serializers import FromInputFile

KEY = "barrierflow.checkpoint-id"


@dataclass
class CatalogReader:
    """Reads the checkpoint id of every table of ``namespace`` in catalog ``catalog_name`` (only
    those named in ``tables`` when given)."""

    conninfo: dict[str, Any]
    catalog_name: str
    namespace: str
    tables: frozenset[str] | None = None
    io: PyArrowFileIO = field(default_factory=PyArrowFileIO)
    _seen: dict[str, int | None] = field(default_factory=dict)  # metadata files never change

    def __post_init__(self) -> None:
        self.conn = psycopg.connect(autocommit=True, **self.conninfo)

    def checkpoint_of(self, location: str) -> int | None:
        if location not in self._seen:
            metadata = FromInputFile.table_metadata(self.io.new_input(location))
            snapshot = next((s for s in metadata.snapshots if s.snapshot_id == metadata.current_snapshot_id), None)
            props = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
            self._seen[location] = int(props[KEY]) if KEY in props else None
        return self._seen[location]

    def read(self) -> dict[str, int | None]:
        """table name -> the checkpoint id of its current snapshot (None: no snapshot of ours)."""
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows = self.conn.execute(
                "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = %s AND "
                "table_namespace = %s", [self.catalog_name, self.namespace]).fetchall()
        return {name: self.checkpoint_of(location) for name, location in rows
                if self.tables is None or name in self.tables}

    def close(self) -> None:
        self.conn.close()


def torn(read: dict[str, int | None]) -> bool:
    """Whether one read shows two tables at different checkpoint ids."""
    return len({cid for cid in read.values() if cid is not None}) > 1
