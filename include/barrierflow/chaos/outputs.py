"""The committed output of a chaos copy, read by readers that share nothing with the sinks.

Each row becomes one canonical string (JSON with sorted keys; timestamps as ISO text), and an
output is the multiset of its rows, so two runs compare without any order or key:

* Parquet: pyarrow reads the committed ``part-*.parquet`` files under the sink's path (the
  files the sink published; write-ahead files live under ``_staging/`` and are not read);
* PostgreSQL: ``SELECT *`` of the table (and no prepared transaction may be left behind);
* Kafka: a ``read_committed`` consumer of kafka-python (the sink writes with confluent-kafka)
  up to the last stable offsets, so records of aborted transactions are never counted; a row
  is the record's key, partition (keyed records only) and value (:func:`kafka_row`).
* Iceberg: a scan of the table's current snapshot to Arrow with pyiceberg, its catalog opened
  with pyiceberg's ``load_catalog`` from the sink's catalog settings (the sink's code opens
  nothing here);
* Delta: the table's current version read to Arrow with the ``deltalake`` package
  (``DeltaTable(path)``); a path that holds no table yet (the first commit creates it) has no rows.

For the table sinks the tables' own histories are read too (:func:`table_commits`): how many
commits of the copy's sink each checkpoint id has, from the Iceberg snapshot summaries and the
Delta commit infos (``barrierflow.checkpoint-id``); more than one for a checkpoint is a
failure of its own, even when the rows came out right.

:func:`prepare_output` makes what a copy's sink needs before it runs: the PostgreSQL table
(``LIKE`` the spec's table, which must exist) and the Kafka topic (as many partitions as the
spec's topic).
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from barrierflow.chaos.scratch import ScratchOutput
from barrierflow.errors import BarrierflowError, UserInputError

Rows = Counter[str]


class OutputReadError(BarrierflowError):
    """A copy's output could not be read; the message names the output and the cause."""


def canonical(row: dict[str, Any]) -> str:
    """One row as text that is equal exactly when the rows are."""
    def plain(value: Any) -> Any:
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value
    return json.dumps({k: plain(v) for k, v in row.items()}, sort_keys=True, default=str)


def with_aliases(rows: Rows, aliases: dict[str, str]) -> Rows:
    """``rows`` with every string value that is a key of ``aliases`` replaced by its value.

    A scratch copy runs under its own pipeline name, so its derived channel topics have names
    of their own; a transformation that writes the topic a record came from (a ``topic``
    column) would make every row of the two copies differ. Both copies' rows are read with
    their topic names mapped back to the spec's (``{copy topic: spec topic}``).
    """
    if not aliases:
        return rows

    def mapped(value: Any) -> Any:
        if isinstance(value, str):
            return aliases.get(value, value)
        if isinstance(value, dict):
            return {k: mapped(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mapped(v) for v in value]
        return value

    out: Rows = Counter()
    for row, count in rows.items():
        out[json.dumps(mapped(json.loads(row)), sort_keys=True, default=str)] += count
    return out


def _dsn(sink: Any) -> str:
    dsn = os.environ.get(sink.dsn_env, "")
    if not dsn:
        raise UserInputError(f"chaos: postgres sink {sink.name!r} needs its connection string in the environment "
                             f"variable {sink.dsn_env} (spec field dsn_env), as the pipeline does")
    return dsn


def _parquet_rows(uri: str) -> Rows:
    import pyarrow.parquet as pq

    rows: Rows = Counter()
    if uri.startswith("file://"):
        from pathlib import Path

        root = Path(uri.removeprefix("file://"))
        files = sorted(root.glob("part-*.parquet")) if root.is_dir() else []
        for path in files:
            rows.update(canonical(r) for r in pq.read_table(path).to_pylist())
        return rows
    from barrierflow.storage import open_store  # S3: only the listing and the bytes, parsed by pyarrow here

    store = open_store(uri)
    for info in store.list("part-"):
        if info.key.endswith(".parquet"):
            rows.update(canonical(r) for r in pq.read_table(io.BytesIO(store.get_bytes(info.key))).to_pylist())
    return rows


def _postgres_rows(sink: Any, table: str, pipeline: str) -> Rows:
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    with psycopg.connect(_dsn(sink), row_factory=dict_row) as conn:
        prepared = conn.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s",
                                (f"bf.{pipeline}.%",)).fetchall()
        if prepared:
            raise OutputReadError(f"table {table}: prepared transactions left behind: {[p['gid'] for p in prepared]}")
        parts = table.split(".")
        rows = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(*parts))).fetchall()
    return Counter(canonical(dict(r)) for r in rows)


def kafka_row(key: bytes | None, partition: int, value: bytes) -> str:
    """One Kafka record as a row: its key, its partition and its value (a JSON object).

    The key is compared as UTF-8 text (hex when it is not UTF-8). The partition is compared
    for keyed records only: the sink places them by key (murmur2), the same in both copies,
    whose topics have the same partition count; an unkeyed record goes to the producer's
    sticky partition of the moment, which differs between any two runs, so its partition says
    nothing about exactly-once and is left out (null).
    """
    text: str | None = None
    if key is not None:
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            text = key.hex()
    return canonical({"key": text, "partition": partition if key is not None else None, "value": json.loads(value)})


def _kafka_rows(servers: str, topic: str, client: Any = None) -> tuple[Rows, str]:
    """The records of ``topic`` a read_committed reader sees, and the client that read them
    (kafka-python: the sink produces with confluent-kafka, so the check does not share a client
    with what it checks); ``client``: the sink's ``client`` settings."""
    from barrierflow.kafka_io.committed_output import read_committed_topic
    from barrierflow.kafka_io.errors import KafkaIOError

    rows: Rows = Counter()
    try:
        for record in read_committed_topic(servers, topic, client):
            rows[kafka_row(record.key, record.partition, record.value)] += 1
    except KafkaIOError as exc:  # the topic is missing, or the read made no progress
        raise OutputReadError(str(exc)) from exc
    return rows, "kafka-python"


def _iceberg_table(sink: Any, table: str) -> Any:
    """The copy's Iceberg table ``table`` as pyiceberg loads it (None: no such table), its
    catalog opened by ``pyiceberg.catalog.load_catalog`` from the sink's ``catalog`` settings."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    settings = sink.catalog
    uri = os.environ.get(settings.uri_env, "").strip() if settings.uri_env else settings.uri
    if not uri:
        raise OutputReadError(f"iceberg table {table}: its catalog has no URI (catalog.uri_env "
                              f"{settings.uri_env or '-'} is not set)")
    catalog = load_catalog(settings.name, **{**settings.properties, "type": settings.type, "uri": uri})
    try:
        return catalog.load_table(table)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _iceberg_rows(sink: Any, table: str) -> Rows:
    rows: Rows = Counter()
    loaded = _iceberg_table(sink, table)
    if loaded is not None:
        for batch in loaded.scan().to_arrow_batch_reader():
            rows.update(canonical(r) for r in batch.to_pylist())
    return rows


def _delta_table(uri: str) -> Any:
    """The Delta table at storage URI ``uri`` as ``deltalake`` opens it (None: no table there)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri.removeprefix("file://"))
    except TableNotFoundError:
        return None


def _delta_rows(uri: str) -> Rows:
    rows: Rows = Counter()
    table = _delta_table(uri)
    if table is not None:
        for batch in table.to_pyarrow_dataset().to_batches():
            rows.update(canonical(r) for r in batch.to_pylist())
    return rows


#: The properties a table commit of barrierflow carries (Iceberg snapshot summary, Delta commit
#: info); read here by name, as any reader of the table would.
_PIPELINE, _SINK, _CHECKPOINT = "barrierflow.pipeline", "barrierflow.sink", "barrierflow.checkpoint-id"


def _ours(properties: dict[str, Any], pipeline: str, sink: str) -> int | None:
    checkpoint = str(properties.get(_CHECKPOINT, ""))
    if properties.get(_PIPELINE) == pipeline and properties.get(_SINK) == sink and checkpoint.isdigit():
        return int(checkpoint)
    return None


def table_commits(output: ScratchOutput, sink: Any, pipeline: str) -> Counter[int]:
    """Checkpoint id -> how many commits of sink ``output.sink`` of pipeline ``pipeline`` (the
    copy's name) the table's own history holds for it: every snapshot in the Iceberg table's
    metadata (not only the current ancestry), every entry of the Delta log's history. Empty for
    a table that does not exist.

    Raises:
        OutputReadError: ``output`` is not a table output, or its table cannot be read.
    """
    found: Counter[int] = Counter()
    try:
        if output.kind == "iceberg":
            table = _iceberg_table(sink, output.target)
            entries = [s.summary.additional_properties if s.summary else {}
                       for s in (table.snapshots() if table is not None else [])]
        elif output.kind == "delta":
            table = _delta_table(output.target)
            entries = table.history() if table is not None else []
        else:
            raise OutputReadError(f"output {output.sink!r} is a {output.kind} output, not a table")
    except OutputReadError:
        raise
    except Exception as exc:  # any reader failure is reported with the table named
        raise OutputReadError(f"reading the history of the {output.kind} table {output.target} of sink "
                              f"{output.sink!r}: {type(exc).__name__}: {exc}") from exc
    for properties in entries:
        checkpoint = _ours(properties, pipeline, output.sink)
        if checkpoint is not None:
            found[checkpoint] += 1
    return found


def read_output(output: ScratchOutput, sink: Any, pipeline: str) -> Rows:
    """The committed rows of ``output`` (``sink``: the copy's sink spec; ``pipeline``: the
    copy's pipeline name, which names its PostgreSQL transactions).

    Raises:
        OutputReadError: the output cannot be read, or PostgreSQL holds prepared transactions.
    """
    try:
        if output.kind == "parquet":
            return _parquet_rows(output.target)
        if output.kind == "postgres":
            return _postgres_rows(sink, output.target, pipeline)
        if output.kind == "kafka":
            return _kafka_rows(sink.bootstrap_servers, output.target, getattr(sink, "client", None))[0]
        if output.kind == "iceberg":
            return _iceberg_rows(sink, output.target)
        if output.kind == "delta":
            return _delta_rows(output.target)
    except OutputReadError:
        raise
    except Exception as exc:  # any reader failure is reported with the output named
        raise OutputReadError(f"reading the {output.kind} output {output.target} of sink {output.sink!r}: "
                              f"{type(exc).__name__}: {exc}") from exc
    raise OutputReadError(f"chaos cannot read a {output.kind!r} output")


def unread_output(output: ScratchOutput) -> str | None:
    """What the location of ``output`` holds that :func:`read_output` does not read, as a
    phrase for a message (None: nothing unread, or an output kind the reader reads in full).

    Only Parquet outputs can hold what the reader skips: it reads the committed
    ``part-*.parquet`` files at the top of the sink's path and nothing else (not sub-folders,
    not ``_staging/``). A PostgreSQL table and a Kafka topic are read in full.
    """
    if output.kind != "parquet":
        return None
    from barrierflow.storage import open_store

    keys = [info.key for info in open_store(output.target).list("")]
    read = [key for key in keys if "/" not in key and key.startswith("part-") and key.endswith(".parquet")]
    if read or not keys:
        return None
    written_ahead = sum(1 for key in keys if key.startswith("_staging/"))
    examples = ", ".join(sorted(keys)[:3])
    return (f"{output.target} holds {len(keys)} object(s) but no committed part-*.parquet at its top "
            f"({written_ahead} of them write-ahead files under _staging/, never committed); e.g. {examples}")


def prepare_output(output: ScratchOutput, sink: Any) -> None:
    """Create what the copy's sink writes into: a table like the spec's; a topic and a
    commit-marker topic with as many partitions as the spec's; the folder of a scratch SQLite
    Iceberg catalog (the Iceberg sink creates its table from the output schema, the Delta sink
    with its first commit, as for any table that does not exist yet).

    Raises:
        UserInputError: the spec's own table or topic (or commit-marker topic) does not exist
            (chaos copies its shape).
    """
    if output.kind == "postgres":
        import psycopg
        from psycopg import sql

        with psycopg.connect(_dsn(sink), autocommit=True) as conn:
            try:
                conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                    sql.Identifier(*output.target.split(".")), sql.Identifier(*output.original.split("."))))
            except psycopg.errors.UndefinedTable as exc:
                raise UserInputError(f"chaos: the postgres sink's table {output.original} does not exist; create "
                                     "it first (chaos creates its scratch tables like it)") from exc
    elif output.kind == "kafka":
        from barrierflow.kafka_io.admin import ensure_topic, partition_counts

        pairs = [("topic", output.original, output.target)]
        if output.marker_topics is not None:
            pairs.append(("commit-marker topic", *output.marker_topics))
        client = getattr(sink, "client", None)
        counts = partition_counts(sink.bootstrap_servers, [original for _, original, _ in pairs], client)
        for (what, original, target), partitions in zip(pairs, counts, strict=True):
            if not partitions:
                raise UserInputError(f"chaos: the kafka sink's {what} {original} does not exist on "
                                     f"{sink.bootstrap_servers}; create it first (the pipeline needs it too): chaos "
                                     "creates its scratch topics with as many partitions")
            ensure_topic(sink.bootstrap_servers, target, partitions, client)
    elif output.kind == "iceberg" and sink.catalog.uri.startswith("sqlite:///"):
        from pathlib import Path

        Path(sink.catalog.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
