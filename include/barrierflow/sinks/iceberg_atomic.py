"""Atomic mode of the Iceberg sink: every table of a checkpoint moves in one PostgreSQL transaction.

pyiceberg's SQL catalog commits a table by writing a new metadata file and then moving the
table's row in ``iceberg_tables`` with a compare-and-swap ``UPDATE ... SET metadata_location =
<new> WHERE metadata_location = <old>``. Readers (any engine using the catalog) see a table as
its row's metadata file says. Committing table by table, a reader can read table A at
checkpoint n and table B at n - 1. With ``catalog.atomic: true`` (a ``type: sql`` catalog on
PostgreSQL; :func:`barrierflow.spec.lakehouse.atomic_problems` checks the rest) the rows of
every table of a checkpoint move in one PostgreSQL transaction instead, so no reader, even one
that knows nothing of barrierflow, sees a torn cut.

The members of the group are the atomic Iceberg sinks of the pipeline (``<stage>/<sink>``),
recorded in ``barrierflow_atomic_members`` when a sink is built (every stage's sink is built
before its first checkpoint, in whatever process runs it). Per completed checkpoint n, each
member's commit (on its stage's sink thread, :class:`AtomicIcebergSink`):

1. publishes the epoch's data files (as the plain sink does) and writes its table's next
   metadata file, an ``append`` snapshot carrying ``barrierflow.checkpoint-id`` n, based on its
   table's newest metadata (the catalog's, or its own staged one of an earlier checkpoint whose
   group has not moved yet). An epoch without rows gets an empty snapshot: in atomic mode every
   table's current snapshot names the checkpoint of the cut it belongs to;
2. records ``(n, member, table, old metadata, new metadata)`` in ``barrierflow_atomic_staged``
   (committed: durable, invisible to readers, who read only ``iceberg_tables``);
3. moves every checkpoint whose every member staged it (ascending, :meth:`AtomicGroup.move`):
   one transaction locks the checkpoint's staged rows, compare-and-swaps each table's row,
   records the cut in ``barrierflow_atomic_cuts``, deletes the staged rows,
   ``PREPARE TRANSACTION 'bf-atomic.<pipeline>.c<n>'`` and then ``COMMIT PREPARED``. The
   member whose staging completed the group moves it; a concurrent mover blocks on the row
   locks and then finds nothing left to move.

A member's ledger entry of epoch n becomes COMMITTED once its part is recorded (durable in the
catalog's database): its table shows the epoch when the group moves, which the last member of
checkpoint n does in the same breath (or a restore, after a crash in between).

In doubt (a crash between ``PREPARE`` and ``COMMIT PREPARED``): the prepared transaction holds
the rows' locks until it is finished. Every commit and restore of a member first finishes the
pipeline's prepared cuts (:meth:`AtomicGroup.resolve_in_doubt`): always ``COMMIT PREPARED``, as
a cut is prepared only after its checkpoint completed (the commits that stage it run on
completion) and after every member recorded its part; a second finisher finds the gid gone
and does nothing, so each cut moves exactly once. Rolling back instead would lose the epochs
that members already recorded COMMITTED in the ledger.

A restore to checkpoint T discards the member's staged rows above T (their epochs are
aborted and produced again); its pre-committed epochs up to T are committed as above, and the
group moves when the last member restores. Metadata files written for a group that never
moved, and data files of a discarded epoch, are orphans: no metadata a reader can reach
names them, so they are harmless (Iceberg's orphan-file removal deletes them).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError, UserInputError
from barrierflow.faults import crash_point
from barrierflow.sinks.cut import TableVersion
from barrierflow.sinks.iceberg import IcebergSink, catalog_uri
from barrierflow.sinks.table import DataFile
from barrierflow.transactions.ledger import Transaction, TxnState
from barrierflow.transactions.two_phase import mid_commit_crash_point

if TYPE_CHECKING:
    import psycopg
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)
MEMBERS = "barrierflow_atomic_members"
STAGED = "barrierflow_atomic_staged"
CUTS = "barrierflow_atomic_cuts"
GID_PREFIX = "bf-atomic."
#: How many checkpoints may wait for a member before each move warns about it.
STALLED_AFTER = 5
_SCHEMA = [
    f"""CREATE TABLE IF NOT EXISTS {MEMBERS} (
        catalog_name TEXT NOT NULL, pipeline TEXT NOT NULL, member TEXT NOT NULL,
        table_namespace TEXT NOT NULL, table_name TEXT NOT NULL, registered_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (catalog_name, pipeline, member))""",
    f"""CREATE TABLE IF NOT EXISTS {STAGED} (
        catalog_name TEXT NOT NULL, pipeline TEXT NOT NULL, checkpoint_id BIGINT NOT NULL, member TEXT NOT NULL,
        table_namespace TEXT NOT NULL, table_name TEXT NOT NULL,
        old_location TEXT, new_location TEXT, snapshot_id BIGINT,
        PRIMARY KEY (catalog_name, pipeline, checkpoint_id, member))""",
    f"""CREATE TABLE IF NOT EXISTS {CUTS} (
        catalog_name TEXT NOT NULL, pipeline TEXT NOT NULL, checkpoint_id BIGINT NOT NULL,
        transaction_id TEXT NOT NULL, tables JSONB NOT NULL, committed_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (catalog_name, pipeline, checkpoint_id))""",
]


def gid_of(pipeline: str, checkpoint_id: int) -> str:
    """The PostgreSQL global transaction id of the cut of ``checkpoint_id``."""
    return f"{GID_PREFIX}{pipeline}.c{checkpoint_id}"


def libpq_params(uri: str) -> dict[str, Any]:
    """psycopg connection parameters of a SQLAlchemy PostgreSQL URL."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if not url.drivername.startswith("postgresql"):
        raise UserInputError(f"catalog.atomic: the catalog URI is {url.drivername}, not PostgreSQL; atomic mode "
                             "needs a sql catalog on PostgreSQL")
    params = {"host": url.host, "port": url.port, "user": url.username, "password": url.password,
              "dbname": url.database}
    return {k: v for k, v in params.items() if v not in (None, "")}


class AtomicGroup:
    """The atomic group of one pipeline in one catalog (module docstring): its rows in the
    catalog's PostgreSQL database."""

    def __init__(self, *, uri: str, catalog_name: str, pipeline: str, connect_timeout: float = 10.0,
                 lock_timeout: float = 30.0) -> None:
        self.params = libpq_params(uri)
        self.lock_timeout = lock_timeout
        self.catalog_name = catalog_name
        self.pipeline = pipeline
        self.connect_timeout = connect_timeout
        self._schema_ready = False

    def where(self) -> str:
        return f"PostgreSQL {self.params.get('host', 'localhost')}:{self.params.get('port', 5432)}/" \
               f"{self.params.get('dbname', '')}"

    @contextlib.contextmanager
    def connect(self, purpose: str) -> Iterator[psycopg.Connection[Any]]:
        """An autocommit connection; psycopg errors become :class:`SinkError` naming ``purpose``."""
        import psycopg

        try:
            conn = psycopg.connect(autocommit=True, connect_timeout=int(self.connect_timeout),
                                   application_name=f"barrierflow {self.pipeline} atomic"[:63], **self.params)
        except psycopg.Error as exc:
            raise SinkError(f"iceberg catalog.atomic: cannot connect to {self.where()} to {purpose}: "
                            f"{' '.join(str(exc).split())}; the commit is retried") from None
        try:
            with conn:
                yield conn
        except psycopg.Error as exc:
            raise SinkError(f"iceberg catalog.atomic: {self.where()} refused to {purpose}: "
                            f"{' '.join(str(exc).split())}") from None

    def ensure_schema(self, conn: psycopg.Connection[Any]) -> None:
        if self._schema_ready:
            return
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
        if row is None or int(row[0]) <= 0:
            raise SinkError(f"iceberg catalog.atomic: {self.where()} has max_prepared_transactions = "
                            f"{row[0] if row else '?'}; atomic mode prepares one transaction per checkpoint: set "
                            "max_prepared_transactions to at least 10 in postgresql.conf and restart the server")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('barrierflow_atomic_schema'))")
            for statement in _SCHEMA:
                conn.execute(statement)
        self._schema_ready = True

    def register(self, member: str, namespace: str, table: str) -> None:
        """Record ``member`` (``<stage>/<sink>``, writing ``namespace.table``) in the group."""
        with self.connect(f"register {member}") as conn:
            self.ensure_schema(conn)
            conn.execute(f"INSERT INTO {MEMBERS} VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                         [self.catalog_name, self.pipeline, member, namespace, table, datetime.now(UTC)])

    def members(self, conn: psycopg.Connection[Any]) -> set[str]:
        rows = conn.execute(f"SELECT member FROM {MEMBERS} WHERE catalog_name = %s AND pipeline = %s",
                            [self.catalog_name, self.pipeline]).fetchall()
        return {r[0] for r in rows}

    def staged_location(self, member: str, checkpoint_id: int | None = None) -> tuple[bool, str | None]:
        """(whether ``member`` staged ``checkpoint_id``, the newest metadata location it staged
        for any checkpoint not yet moved, None when none)."""
        with self.connect(f"read what {member} staged") as conn:
            self.ensure_schema(conn)
            rows = conn.execute(
                f"SELECT checkpoint_id, new_location FROM {STAGED} WHERE catalog_name = %s AND pipeline = %s "
                "AND member = %s ORDER BY checkpoint_id", [self.catalog_name, self.pipeline, member]).fetchall()
        newest = next((loc for _cid, loc in reversed(rows) if loc is not None), None)
        return any(cid == checkpoint_id for cid, _ in rows), newest

    def part(self, member: str, checkpoint_id: int) -> tuple[int | None] | None:
        """``(snapshot id,)`` of ``member``'s recorded part of ``checkpoint_id`` (``(None,)``:
        its table did not exist yet), or None when none is recorded (moved, or never staged)."""
        with self.connect(f"read the part of {member}") as conn:
            self.ensure_schema(conn)
            row = conn.execute(f"SELECT snapshot_id FROM {STAGED} WHERE catalog_name = %s AND pipeline = %s AND "
                               "member = %s AND checkpoint_id = %s",
                               [self.catalog_name, self.pipeline, member, checkpoint_id]).fetchone()
        return None if row is None else (None if row[0] is None else int(row[0]),)

    def stage(self, checkpoint_id: int, member: str, namespace: str, table: str, old: str | None,
              new: str | None, snapshot_id: int | None) -> None:
        """Record ``member``'s part of the cut of ``checkpoint_id`` (a repeat is a no-op)."""
        with self.connect(f"stage checkpoint {checkpoint_id} of {member}") as conn:
            conn.execute(f"INSERT INTO {STAGED} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                         [self.catalog_name, self.pipeline, checkpoint_id, member, namespace, table, old, new,
                          snapshot_id])

    def discard_above(self, member: str, checkpoint_id: int | None) -> int:
        """Delete ``member``'s staged parts of checkpoints above ``checkpoint_id`` (all: None)."""
        with self.connect(f"discard what {member} staged") as conn:
            self.ensure_schema(conn)
            cur = conn.execute(f"DELETE FROM {STAGED} WHERE catalog_name = %s AND pipeline = %s AND member = %s "
                               "AND checkpoint_id > %s",
                               [self.catalog_name, self.pipeline, member, -1 if checkpoint_id is None
                                else checkpoint_id])
            return cur.rowcount

    def resolve_in_doubt(self) -> list[str]:
        """``COMMIT PREPARED`` every prepared cut of this pipeline (module docstring: a prepared
        cut's checkpoint completed); returns the gids this call finished."""
        from psycopg import errors, sql

        done = []
        with self.connect("finish prepared cuts") as conn:
            gids = [r[0] for r in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
                [f"{GID_PREFIX}{self.pipeline}.c%"]).fetchall()]
            for gid in gids:
                try:
                    conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
                except errors.UndefinedObject:
                    continue  # finished meanwhile by another member
                log.warning("iceberg catalog.atomic: committed the prepared cut %s a crash left in doubt", gid)
                done.append(gid)
        return done

    def move(self) -> list[int]:
        """Move every checkpoint all members staged, ascending, each in one transaction; returns
        the checkpoint ids this call moved."""
        moved = []
        with self.connect("move the tables of a cut") as conn:
            self.ensure_schema(conn)
            # a cut another process left prepared holds its rows' locks: give up and retry the
            # commit (which finishes that cut first) instead of waiting for ever
            conn.execute(f"SET lock_timeout = '{int(self.lock_timeout * 1000)}ms'")
            members = self.members(conn)
            rows = conn.execute(f"SELECT checkpoint_id, member FROM {STAGED} WHERE catalog_name = %s AND "
                                "pipeline = %s ORDER BY checkpoint_id", [self.catalog_name, self.pipeline]).fetchall()
            staged: dict[int, set[str]] = {}
            for cid, member in rows:
                staged.setdefault(int(cid), set()).add(member)
            for cid in sorted(staged):
                if not members or not members <= staged[cid]:
                    if len(staged) > STALLED_AFTER:
                        log.warning(
                            "iceberg catalog.atomic: %d checkpoints of pipeline %s wait for member(s) %s, which "
                            "did not commit checkpoint %d. If a table left the pipeline, remove it: DELETE FROM %s "
                            "WHERE catalog_name = '%s' AND pipeline = '%s' AND member = '<stage>/<sink>'",
                            len(staged), self.pipeline, ", ".join(sorted(members - staged[cid])), cid, MEMBERS,
                            self.catalog_name, self.pipeline)
                    break  # a member has not staged it yet: it moves when the last one does
                if self._move_one(conn, cid):
                    moved.append(cid)
        return moved

    def _move_one(self, conn: psycopg.Connection[Any], checkpoint_id: int) -> bool:
        from psycopg import sql

        gid = gid_of(self.pipeline, checkpoint_id)
        conn.execute("BEGIN")
        try:
            rows = conn.execute(
                f"SELECT member, table_namespace, table_name, old_location, new_location, snapshot_id FROM {STAGED} "
                "WHERE catalog_name = %s AND pipeline = %s AND checkpoint_id = %s ORDER BY member FOR UPDATE",
                [self.catalog_name, self.pipeline, checkpoint_id]).fetchall()
            if not rows:
                conn.execute("ROLLBACK")
                return False  # moved meanwhile by another member
            tables = {}
            for member, namespace, table, old, new, snapshot_id in rows:
                tables[member] = {"table": f"{namespace}.{table}", "snapshot_id": snapshot_id, "metadata": new}
                if new is None:
                    continue
                cur = conn.execute(
                    "UPDATE iceberg_tables SET metadata_location = %s, previous_metadata_location = %s "
                    "WHERE catalog_name = %s AND table_namespace = %s AND table_name = %s AND metadata_location = %s",
                    [new, old, self.catalog_name, namespace, table, old])
                if cur.rowcount != 1:
                    raise SinkError(
                        f"iceberg catalog.atomic: table {namespace}.{table} (member {member}) is no longer at the "
                        f"metadata {old} its checkpoint {checkpoint_id} commit was based on: another writer "
                        "committed to it. Atomic tables must be written by this pipeline only; restore the pipeline "
                        "('barrierflow restore SPEC --latest'), which bases the commit on the table as it is now")
            conn.execute(f"INSERT INTO {CUTS} VALUES (%s, %s, %s, %s, %s, %s)",
                         [self.catalog_name, self.pipeline, checkpoint_id, gid, json.dumps(tables, sort_keys=True),
                          datetime.now(UTC)])
            conn.execute(f"DELETE FROM {STAGED} WHERE catalog_name = %s AND pipeline = %s AND checkpoint_id = %s",
                         [self.catalog_name, self.pipeline, checkpoint_id])
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        crash_point("iceberg_atomic_prepared", checkpoint_id=checkpoint_id)
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
        log.info("iceberg catalog.atomic: checkpoint %d moved %d table(s) in one transaction (%s)", checkpoint_id,
                 sum(1 for t in tables.values() if t["metadata"]), gid)
        return True


class _StagingCatalog:
    """Stands in for the SQL catalog of one commit: pyiceberg builds and writes the new metadata
    file from ``base`` as its ``commit_table`` would, but the table's row is not moved; the
    locations are kept in :attr:`staged` for :meth:`AtomicGroup.stage`."""

    def __init__(self, real: SqlCatalog, base: Table) -> None:
        self.real = real
        self.base = base
        self.staged: tuple[str, str] | None = None

    def commit_table(self, table: Table, requirements: tuple[Any, ...], updates: tuple[Any, ...]) -> Any:
        from pyiceberg.table import CommitTableResponse

        staged = self.real._update_and_stage_table(self.base, table.name(), requirements, updates)
        self.real._write_metadata(metadata=staged.metadata, io=staged.io, metadata_path=staged.metadata_location)
        self.staged = (self.base.metadata_location, staged.metadata_location)
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class AtomicIcebergSink(IcebergSink):
    """An Iceberg sink whose table moves with the pipeline's other atomic tables (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group = AtomicGroup(uri=catalog_uri(self.spec.catalog, self.work_dir), catalog_name=self.spec.catalog.name,
                                 pipeline=str(self.pipeline_name))
        self.member = f"{self.stage}/{self.name}"
        self.group.register(self.member, self.spec.namespace, self.spec.table_name)

    def _base(self, table: Table | None, staged_location: str | None) -> Table | None:
        """The table as its newest metadata says: the member's staged one, else the catalog's."""
        if staged_location is None or table is None:
            return table
        from pyiceberg.serializers import FromInputFile
        from pyiceberg.table import Table as IcebergTable

        metadata = FromInputFile.table_metadata(table.io.new_input(staged_location))
        return IcebergTable(table.name(), metadata=metadata, metadata_location=staged_location, io=table.io,
                            catalog=self.catalog)

    def commit(self, txn: Transaction) -> None:
        """Stage this table's part of ``txn``'s cut, then move every cut all members staged."""
        self.group.resolve_in_doubt()
        cid = txn.checkpoint_id
        done, staged_location = self.group.staged_location(self.member, cid)
        if not done:
            table = self.load()
            base = self._base(table, staged_location)
            committed = self.committed_checkpoint(base) if base is not None else None
            if committed is None or committed < cid:
                self._stage(txn, base, self._publish(txn))
            elif staged_location is None:
                log.info("sink %s: %s already holds checkpoint %d", self.name, self.describe_table(), cid)
        self.group.move()
        # the part recorded (and moved, if this member completed the cut), the ledger not yet told
        mid_commit_crash_point(self.name, 1)

    def _stage(self, txn: Transaction, base: Table | None, files: list[DataFile]) -> None:
        from pyiceberg.table import Table as IcebergTable

        from barrierflow.sinks.iceberg_reads import MetadataOnceTransaction

        if base is None:
            if not files:  # no table and nothing to write: the table appears with its first rows
                self.group.stage(txn.checkpoint_id, self.member, self.spec.namespace, self.spec.table_name,
                                 None, None, None)
                return
            import pyarrow.parquet as pq

            with self.table_store_file(files[0].key) as handle:
                base = self.ensure_table(pq.read_schema(handle))
        staging = _StagingCatalog(self.catalog, base)  # type: ignore[arg-type]
        table = IcebergTable(base.name(), metadata=base.metadata, metadata_location=base.metadata_location,
                             io=base.io, catalog=staging)  # type: ignore[arg-type]
        props = self.commit_properties(txn)
        if files:
            try:
                with MetadataOnceTransaction(table) as tx:  # table.add_files, reading less
                    tx.add_files([f"{self.location}/{f.key}" for f in files], snapshot_properties=props,
                                 check_duplicate_files=False)
            except ValueError as exc:
                raise SinkError(f"sink {self.name!r}: {self.describe_table()} refused the files of checkpoint "
                                f"{txn.checkpoint_id}: {exc}") from exc
        else:
            with table.transaction() as tx, tx.update_snapshot(snapshot_properties=props).fast_append():
                pass  # an empty snapshot: the table's current snapshot names this cut's checkpoint
        assert staging.staged is not None
        snapshot = table.current_snapshot()
        self.group.stage(txn.checkpoint_id, self.member, self.spec.namespace, self.spec.table_name, staging.staged[0],
                         staging.staged[1], snapshot.snapshot_id if snapshot else None)

    def restore(self, target_checkpoint: int | None, barrier_batch: int | None) -> Any:
        """Finish prepared cuts, discard this member's staged parts above ``target_checkpoint``,
        then restore as every table sink does (its commits stage and move as above)."""
        self.group.resolve_in_doubt()
        discarded = self.group.discard_above(self.member, target_checkpoint)
        if discarded:
            log.info("sink %s: discarded %d staged cut part(s) above checkpoint %s", self.name, discarded,
                     target_checkpoint)
        return super().restore(target_checkpoint, barrier_batch)

    def record_cut(self, checkpoint_id: int, *, settled: bool = False) -> None:
        """Write the cut record of ``checkpoint_id``. While this member's part of that cut is
        recorded but the group has not moved yet (another member's commit moves it), the
        record names the snapshot the part adds, which becomes the table's current one when
        the group moves: the cut of a pipeline is complete only once every member recorded
        it, and the member that moves the group records after the move. ``settled`` as for
        every table sink."""
        if self.cuts is None:
            return
        if not settled and any(t.checkpoint_id <= checkpoint_id and t.state is TxnState.PRECOMMITTED
                               for t in self.ledger.list(self.name)):
            return  # as every table sink: a later commit or the restore writes it
        part = self.group.part(self.member, checkpoint_id)
        if part is None:
            super().record_cut(checkpoint_id, settled=True)  # moved (or nothing staged): the catalog says it
            return
        version = None if part[0] is None else TableVersion(
            "iceberg", self.spec.table, part[0], checkpoint_id,
            {"name": self.spec.catalog.name, "type": self.spec.catalog.type})
        self.cuts.record(checkpoint_id, {self.name: version})
