"""The PostgreSQL sink: exactly-once rows through ``PREPARE TRANSACTION`` per epoch.

Protocol per epoch n (two-phase commit, :class:`~barrierflow.transactions.two_phase.TwoPhaseCommitSink`;
the write-ahead micro-batches of :mod:`barrierflow.sinks.write_ahead` are the write-ahead log):

* **pre-commit** (at the barrier of checkpoint n): on one connection ``BEGIN``; apply every
  write-ahead batch of the epoch in ascending batch order (``insert``: ``COPY``, of the CSV the
  executors wrote ahead (:mod:`barrierflow.sinks.copy_rows`), so the driver only streams bytes;
  ``upsert``:
  ``INSERT ... ON CONFLICT (key_columns) DO UPDATE SET <every other column> = EXCLUDED.<column>``,
  one statement per row, so a later row or batch overwrites an earlier one); insert the
  epoch's row into the marker table ``barrierflow_commits``; ``PREPARE TRANSACTION '<gid>'``.
  The rows are now durable (they survive a server restart) and invisible to every reader.
* **commit** (after checkpoint n completed): ``COMMIT PREPARED '<gid>'``. Idempotent: when
  ``<gid>`` is no longer prepared, the marker row decides. It commits atomically with the
  data, so present means the epoch already committed (no-op); absent means the prepared
  transaction was rolled back (by an operator or another process) and the epoch's rows were
  never written: :class:`SinkError`. The sink does not silently re-apply the epoch in that
  case: the write-ahead batches are still there and the job would repeat them after a restore
  from a checkpoint older than n, which is the fix the message names. Re-applying behind
  the operator's back would hide whoever rolled the transaction back.
* **abort**: ``ROLLBACK PREPARED '<gid>'`` if it is prepared, else a no-op. The write-ahead
  batches are never touched here: the template hands them to the next epoch or the restore
  discards them.
* **reconciliation**: ``pg_prepared_xacts`` is the source of truth. Every prepared
  transaction of this pipeline and sink (gid ``bf.<pipeline>.<sink>.e<checkpoint>.a<attempt>``)
  the ledger does not know, for example left by a pre-commit that crashed after ``PREPARE``
  but before the ledger was updated, is an orphan: :meth:`PostgresSink.external_orphans`
  lists them and a restore rolls them back.

The target table must exist; barrierflow never runs DDL on it (:meth:`PostgresSink.ensure_table`
exists for tests and quick starts). The marker table is created on first use in the
connection's default schema (autocommit, outside any epoch transaction)::

    CREATE TABLE barrierflow_commits (pipeline text NOT NULL, sink text NOT NULL,
        checkpoint_id bigint NOT NULL, transaction_id text PRIMARY KEY,
        committed_at timestamptz NOT NULL DEFAULT now())

The server needs ``max_prepared_transactions`` > 0 (at least ``checkpoint.max_concurrent`` + 1),
and ``COMMIT PREPARED`` must run as the role that prepared (or a superuser) in the same
database. The connection string comes from the environment variable ``spec.dsn_env`` when
it is used; it, and the password in it, never appear in messages or logs.

Row locks and ``checkpoint.max_concurrent``: a prepared transaction keeps the row locks of its
updates (and the unique-index entries of its inserts) until ``COMMIT PREPARED``. In upsert
mode, or with a unique key on the table, epoch n+1's pre-commit therefore waits for epoch
n's commit whenever it touches the same keys. With ``max_concurrent`` 1 (the default) that is
fine: the coordinator triggers barrier n+1 only after checkpoint n completed, and queues the
commit of n on the sinks' ordered thread before the pre-commit of n+1. With
``max_concurrent`` > 1 (or after checkpoint n failed *after* its pre-commit, whose prepared
transaction then waits for the next completed checkpoint, as in Flink) the pre-commit of n+1
would wait on n, which cannot commit before n+1 completes. The sink bounds that wait with
``lock_timeout`` and fails the pre-commit with a :class:`SinkError` saying so; the
checkpoint then fails, and a restart rolls the older epoch back and replays it. Use upsert
with ``max_concurrent`` 1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SinkError
from barrierflow.sinks.copy_rows import COPY_COLUMN, decoded, fits, is_encoded, row_count, row_schema
from barrierflow.spec.models import PostgresSinkSpec
from barrierflow.transactions.ledger import Transaction
from barrierflow.transactions.two_phase import TwoPhaseCommitSink, mid_commit_crash_point
from barrierflow.transactions.write_ahead import WriteAheadBatches

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa

log = logging.getLogger(__name__)

MARKER_TABLE = "barrierflow_commits"
#: PostgreSQL's GIDSIZE is 200 bytes including the terminating NUL.
GID_MAX_BYTES = 199
_MARKER_DDL = (
    "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, checkpoint_id bigint NOT NULL, "
    "transaction_id text PRIMARY KEY, committed_at timestamptz NOT NULL DEFAULT now())"
)


def pg_type(arrow_type: pa.DataType) -> str:
    """The PostgreSQL column type for an Arrow type (used for suggested DDL and :meth:`ensure_table`).

    int8/16 -> smallint, int32 -> integer, int64 (and unsigned) -> bigint, float32 -> real,
    float64 -> double precision, string -> text, bool -> boolean, timestamp with a time zone ->
    timestamptz, without -> timestamp, date -> date, decimal(p, s) -> numeric(p, s),
    binary -> bytea; anything else -> text."""
    import pyarrow as pa

    t = pa.types
    if t.is_boolean(arrow_type):
        return "boolean"
    if t.is_int8(arrow_type) or t.is_int16(arrow_type) or t.is_uint8(arrow_type):
        return "smallint"
    if t.is_int32(arrow_type) or t.is_uint16(arrow_type):
        return "integer"
    if t.is_integer(arrow_type):
        return "bigint"
    if t.is_float16(arrow_type) or t.is_float32(arrow_type):
        return "real"
    if t.is_float64(arrow_type):
        return "double precision"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "text"
    if t.is_timestamp(arrow_type):
        return "timestamptz" if arrow_type.tz else "timestamp"
    if t.is_date(arrow_type):
        return "date"
    if t.is_decimal(arrow_type):
        return f"numeric({arrow_type.precision}, {arrow_type.scale})"
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "bytea"
    return "text"


def _rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """The rows of ``table`` as tuples of Python values, in table order, batch by batch."""
    for batch in table.to_batches():
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


class PostgresSink(TwoPhaseCommitSink):
    """Rows of a pipeline into ``spec.table``, one prepared transaction per epoch.

    Contracts (beyond the template's): :meth:`pre_commit` leaves exactly one prepared
    transaction named :meth:`transaction_id` holding the epoch's rows and marker row, or
    none; :meth:`commit` and :meth:`abort` are idempotent and never touch write-ahead data; every
    error raised on purpose is a :class:`SinkError` whose message names the server as
    ``host:port/database`` only (never the connection string or password) and the fix.
    """

    sink_type = "postgres"

    def __init__(self, *, spec: PostgresSinkSpec, write_ahead_uri: str, lock_timeout: float = 10.0,
                 connect_timeout: int = 10, **template_kwargs: Any) -> None:
        """``lock_timeout`` (seconds) bounds a pre-commit's wait for rows locked by another
        prepared transaction (see the module docstring); ``connect_timeout`` (seconds, >= 2)
        bounds every connection attempt. ``template_kwargs`` go to :class:`TwoPhaseCommitSink`."""
        super().__init__(write_ahead=WriteAheadBatches(write_ahead_uri), **template_kwargs)
        self.spec = spec
        self.lock_timeout = lock_timeout
        self.connect_timeout = max(2, int(connect_timeout))
        self._schema_ready = False
        longest = f"bf.{self.pipeline}.{self.name}.e{10**15}.a{10**6}"
        if len(longest.encode()) > GID_MAX_BYTES:
            raise SinkError(
                f"postgres sink {self.name!r} of pipeline {self.pipeline!r}: its transaction ids "
                f"(bf.<pipeline>.<sink>.e<checkpoint>.a<attempt>) could exceed PostgreSQL's {GID_MAX_BYTES}-byte "
                "limit for prepared transaction ids; shorten the sink or pipeline name"
            )
        self._gid = re.compile(rf"^bf\.{re.escape(self.pipeline)}\.{re.escape(self.name)}\.e\d+\.a\d+$")

    # -- connection -------------------------------------------------------------------------
    def _dsn(self) -> str:
        dsn = os.environ.get(self.spec.dsn_env, "")
        if not dsn.strip():
            raise SinkError(
                f"postgres sink {self.name!r}: the environment variable {self.spec.dsn_env} (spec field dsn_env) "
                f"is not set; set it to the connection string of the database holding table {self.spec.table}, "
                f"e.g. {self.spec.dsn_env}='postgresql://USER@HOST:5432/DBNAME' (keep the password in ~/.pgpass "
                "or PGPASSWORD, not in the spec)"
            )
        return dsn

    def _params(self, dsn: str) -> dict[str, str]:
        from psycopg.conninfo import conninfo_to_dict

        try:
            return {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
        except Exception:
            raise SinkError(
                f"postgres sink {self.name!r}: the value of {self.spec.dsn_env} is not a valid PostgreSQL "
                "connection string (expected postgresql://USER@HOST:PORT/DBNAME or 'host=... dbname=...')"
            ) from None

    def server(self) -> str:
        """Where the sink writes, as ``host:port/database`` (no user, no password)."""
        params = self._params(self._dsn())
        host = params.get("host") or os.environ.get("PGHOST") or "local socket"
        port = params.get("port") or os.environ.get("PGPORT") or "5432"
        dbname = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "(default)"
        return f"{host}:{port}/{dbname}"

    def _scrub(self, text: str) -> str:
        """``text`` with the connection string and the password in it replaced by ``***``."""
        dsn = os.environ.get(self.spec.dsn_env, "")
        secrets = [dsn, self._params(dsn).get("password", "")] if dsn.strip() else []
        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    @contextlib.contextmanager
    def _connect(self, purpose: str) -> Iterator[psycopg.Connection[Any]]:
        """An autocommit connection; psycopg errors become :class:`SinkError` naming ``purpose``."""
        import psycopg

        dsn = self._dsn()
        where = self.server()
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=self.connect_timeout,
                                   application_name=f"barrierflow {self.pipeline}/{self.name}"[:63])
        except psycopg.Error as exc:
            reason = " ".join(self._scrub(str(exc)).split()).rstrip(".?")
            raise SinkError(
                f"postgres sink {self.name!r}: cannot connect to {where} to {purpose}: {reason}. "
                f"Check that PostgreSQL is running and reachable there and that {self.spec.dsn_env} names the right "
                "server, user and database; the operation is retried with the next checkpoint or restore"
            ) from None
        try:
            with conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise SinkError(
                f"postgres sink {self.name!r}: the connection to {where} failed while trying to {purpose}: "
                f"{self._scrub(str(exc)).strip()}. Check the server's health; a transaction left prepared is "
                "finished by the next commit or restore"
            ) from None
        except psycopg.Error as exc:
            raise SinkError(
                f"postgres sink {self.name!r}: {where} refused to {purpose}: {self._scrub(str(exc)).strip()}"
            ) from None

    def _table_ident(self) -> Any:
        from psycopg import sql

        return sql.Identifier(*self.spec.table.split("."))

    # -- setup ------------------------------------------------------------------------------
    def ensure_schema(self) -> None:
        """Check ``max_prepared_transactions`` > 0 and create the marker table if missing
        (autocommit, outside any epoch transaction). Called lazily before the first pre-commit."""
        from psycopg import errors, sql

        with self._connect("prepare the marker table") as conn:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
            if row is None or int(row[0]) <= 0:
                raise SinkError(
                    f"postgres sink {self.name!r}: {self.server()} has max_prepared_transactions = 0, so it cannot "
                    "hold an epoch's prepared transaction; set max_prepared_transactions to at least "
                    "checkpoint.max_concurrent + 1 (e.g. 20) in postgresql.conf and restart the server"
                )
            if not self._exists(conn, MARKER_TABLE):
                with contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable):  # created concurrently
                    conn.execute(sql.SQL(_MARKER_DDL).format(sql.Identifier(MARKER_TABLE)))
        self._schema_ready = True

    @staticmethod
    def _exists(conn: psycopg.Connection[Any], quoted_or_plain: str) -> bool:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [quoted_or_plain]).fetchone()
        return bool(row and row[0])

    def ensure_table(self, schema: pa.Schema) -> None:
        """Create ``spec.table`` from an Arrow schema if missing (primary key ``key_columns`` in
        upsert mode). For tests and quick starts only: in production the user owns the DDL."""
        with self._connect(f"create table {self.spec.table}") as conn:
            conn.execute(self._create_table_sql(schema))

    def _create_table_sql(self, schema: pa.Schema) -> Any:
        from psycopg import sql

        parts = [sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.type))) for f in schema]
        if self.spec.mode == "upsert":
            parts.append(sql.SQL("PRIMARY KEY ({})").format(
                sql.SQL(", ").join(sql.Identifier(k) for k in self.spec.key_columns)))
        return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._table_ident(), sql.SQL(", ").join(parts))

    # -- the transaction ------------------------------------------------------------------------
    def _sql_gid(self, verb: str, gid: str) -> Any:
        from psycopg import sql

        return sql.SQL(verb + " {}").format(sql.Literal(gid))  # type: ignore[arg-type]

    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"batches": batches, "gid": txn_id, "table": self.spec.table, "mode": self.spec.mode}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        """Apply the epoch's write-ahead batches and marker row in one transaction and PREPARE it.

        On any failure nothing stays prepared (the transaction is rolled back). A prepared
        transaction of the same gid left by an earlier try of this very transaction (the
        ledger says OPEN, so it was never recorded as pre-committed) is rolled back first."""
        from psycopg import errors, sql

        if not self._schema_ready:
            self.ensure_schema()
        gid = txn.transaction_id
        with self._connect(f"pre-commit epoch {txn.checkpoint_id} ({gid})") as conn:
            if gid in self._prepared(conn):
                log.warning("postgres sink %s: rolling back a stale prepared transaction %s of an earlier try",
                            self.name, gid)
                conn.execute(self._sql_gid("ROLLBACK PREPARED", gid))
            conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(self.lock_timeout * 1000)}ms")))
            rows = 0
            conn.execute("BEGIN")
            try:
                checked = False
                column_types: dict[str, str] = {}
                for batch in sorted(txn.batches):
                    table = self.write_ahead.read(batch)
                    if table is None or table.num_rows == 0:
                        continue
                    if not checked:
                        self._check_table(conn, row_schema(table) if is_encoded(table) else table.schema)
                        checked = True
                        column_types = self._column_types(conn)
                    rows += self._apply(conn, table, batch, column_types)
                try:
                    conn.execute(
                        sql.SQL("INSERT INTO {} (pipeline, sink, checkpoint_id, transaction_id) "
                                "VALUES (%s, %s, %s, %s)").format(sql.Identifier(MARKER_TABLE)),
                        [self.pipeline, self.name, txn.checkpoint_id, gid])
                except errors.UniqueViolation:
                    raise SinkError(
                        f"postgres sink {self.name!r}: transaction {gid} is already committed in {self.server()} "
                        f"(table {MARKER_TABLE}); a transaction id was reused, which means the attempt number did "
                        "not increase after a restart. Restore the job from its latest checkpoint so the attempt "
                        "number is advanced"
                    ) from None
                conn.execute(self._sql_gid("PREPARE TRANSACTION", gid))
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
        log.info("postgres sink %s: prepared %s (%d rows of batches %s)", self.name, gid, rows, txn.batches)
        return {"gid": gid, "rows": rows, "server": self.server()}

    def _check_table(self, conn: psycopg.Connection[Any], schema: pa.Schema) -> None:
        if self._exists(conn, self._table_ident().as_string(conn)):
            return
        raise SinkError(
            f"postgres sink {self.name!r}: table {self.spec.table} does not exist in {self.server()}; barrierflow "
            f"does not create it (you own its DDL). Create it, for example: "
            f"{self._create_table_sql(schema).as_string(conn)}"
        )

    def _column_types(self, conn: psycopg.Connection[Any]) -> dict[str, str]:
        """The table's columns and their base types (``pg_type.typname``)."""
        found = conn.execute(
            "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            [self._table_ident().as_string(conn)]).fetchall()
        return {str(name): str(type_name) for name, type_name in found}

    def _apply(self, conn: psycopg.Connection[Any], table: pa.Table, batch: int,
               column_types: dict[str, str]) -> int:
        """Write one write-ahead batch inside the open transaction; returns its row count.

        A batch written ahead as COPY input (:mod:`barrierflow.sinks.copy_rows`) is streamed into
        ``COPY ... (FORMAT csv)`` when the sink inserts and every column of the table
        (``column_types``) reads its CSV text as it reads psycopg's; otherwise it is decoded and
        applied as rows, as a batch written ahead as rows is."""
        from psycopg import errors, sql

        copy_input = None
        if is_encoded(table):
            schema = row_schema(table)
            if self.spec.mode == "insert" and all(
                    fits(field.type, column_types[field.name]) for field in schema if field.name in column_types):
                copy_input = table
            else:
                table = decoded(table)
        columns = list(schema.names if copy_input is not None else table.column_names)
        idents = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        try:
            if copy_input is not None:
                with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                        self._table_ident(), idents)) as copy:
                    for chunk in copy_input.column(COPY_COLUMN).to_pylist():
                        copy.write(chunk)
                return row_count(copy_input)
            if self.spec.mode == "insert":
                with conn.cursor() as cur, cur.copy(
                        sql.SQL("COPY {} ({}) FROM STDIN").format(self._table_ident(), idents)) as copy:
                    for row in _rows(table):
                        copy.write_row(row)
            else:
                missing = [k for k in self.spec.key_columns if k not in columns]
                if missing:
                    raise SinkError(
                        f"postgres sink {self.name!r}: key_columns {missing} are not columns of the query's output "
                        f"(batch {batch} has {columns}); fix key_columns in the spec or select those columns"
                    )
                others = [c for c in columns if c not in self.spec.key_columns]
                action = (sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in others))
                    if others else sql.SQL("DO NOTHING"))
                stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
                    self._table_ident(), idents, sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                    sql.SQL(", ").join(sql.Identifier(k) for k in self.spec.key_columns), action)
                with conn.cursor() as cur:
                    cur.executemany(stmt, list(_rows(table)))
        except errors.UndefinedColumn as exc:
            raise SinkError(
                f"postgres sink {self.name!r}: write-ahead batch {batch} has a column table {self.spec.table} lacks "
                f"({exc.diag.message_primary}); add it to the table or drop it from the query"
            ) from None
        except errors.InvalidColumnReference as exc:
            raise SinkError(
                f"postgres sink {self.name!r}: upsert into {self.spec.table} needs a unique index or primary key on "
                f"{self.spec.key_columns} ({exc.diag.message_primary}); create one, e.g. ALTER TABLE "
                f"{self.spec.table} ADD PRIMARY KEY ({', '.join(self.spec.key_columns)})"
            ) from None
        except errors.LockNotAvailable:
            conn.execute("ROLLBACK")
            held = [g for g in self._prepared(conn) if self._gid.match(g)]
            raise SinkError(
                f"postgres sink {self.name!r}: rows of {self.spec.table} stayed locked for more than "
                f"{self.lock_timeout:g} s (lock_timeout) while applying batch {batch}; prepared transactions of this "
                f"sink holding locks: {held or 'none'}. An earlier epoch whose checkpoint has not completed still "
                "holds them (upsert needs checkpoint.max_concurrent 1); the checkpoint fails and a restart rolls "
                "that epoch back and replays it"
            ) from None
        return int(table.num_rows)

    def _prepared(self, conn: psycopg.Connection[Any]) -> list[str]:
        rows = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                            "ORDER BY prepared, gid").fetchall()
        return [str(r[0]) for r in rows]

    def _committed(self, conn: psycopg.Connection[Any], gid: str) -> bool:
        from psycopg import sql

        if not self._exists(conn, MARKER_TABLE):
            return False
        row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE transaction_id = %s").format(
            sql.Identifier(MARKER_TABLE)), [gid]).fetchone()
        return row is not None

    def commit(self, txn: Transaction) -> None:
        """``COMMIT PREPARED``; a no-op when the marker table shows the epoch committed already.
        Raises :class:`SinkError` when the prepared transaction is gone without having committed."""
        from psycopg import errors

        gid = txn.transaction_id
        with self._connect(f"commit epoch {txn.checkpoint_id} ({gid})") as conn:
            try:
                conn.execute(self._sql_gid("COMMIT PREPARED", gid))
            except errors.UndefinedObject:
                if self._committed(conn, gid):
                    log.info("postgres sink %s: %s was already committed", self.name, gid)
                    return
                raise SinkError(
                    f"postgres sink {self.name!r}: prepared transaction {gid} (epoch {txn.checkpoint_id}, batches "
                    f"{txn.batches}) is gone from {self.server()} without having committed: it was rolled back "
                    "(by an operator or another process), so the epoch's rows were never written. Its write-ahead "
                    f"batches are kept: restore the job from a checkpoint older than {txn.checkpoint_id} so the "
                    "epoch is produced again"
                ) from None
            except errors.ObjectNotInPrerequisiteState as exc:
                raise SinkError(
                    f"postgres sink {self.name!r}: cannot commit {gid} from {self.server()}: "
                    f"{exc.diag.message_primary}; point {self.spec.dsn_env} at the database it was prepared in"
                ) from None
            log.info("postgres sink %s: committed %s", self.name, gid)
            mid_commit_crash_point(self.name, 1)

    def abort(self, txn: Transaction) -> None:
        """``ROLLBACK PREPARED`` if ``<gid>`` is prepared, else a no-op (write-ahead data is kept)."""
        gid = txn.transaction_id
        with self._connect(f"abort epoch {txn.checkpoint_id} ({gid})") as conn:
            if gid in self._prepared(conn):
                conn.execute(self._sql_gid("ROLLBACK PREPARED", gid))
                log.info("postgres sink %s: rolled back %s", self.name, gid)
            elif self._committed(conn, gid):
                log.warning("postgres sink %s: %s (epoch %d) was already committed; its rows stay visible",
                            self.name, gid, txn.checkpoint_id)

    # -- reconciliation -----------------------------------------------------------------------
    def prepared_transactions(self) -> list[str]:
        """Gids prepared in the sink's database by this pipeline and sink, oldest first."""
        with self._connect("list prepared transactions") as conn:
            return [g for g in self._prepared(conn) if self._gid.match(g)]

    def external_orphans(self, known: set[str]) -> list[str]:
        return [g for g in self.prepared_transactions() if g not in known]

    def abort_orphan(self, external_id: str) -> None:
        """``ROLLBACK PREPARED`` an orphan of this pipeline and sink; a no-op if it is gone."""
        if not self._gid.match(external_id):
            raise SinkError(f"postgres sink {self.name!r}: {external_id!r} is not a transaction of this sink; "
                            "refusing to roll it back")
        with self._connect(f"roll back orphan {external_id}") as conn:
            if external_id in self._prepared(conn):
                conn.execute(self._sql_gid("ROLLBACK PREPARED", external_id))
                log.info("postgres sink %s: rolled back orphan %s", self.name, external_id)
