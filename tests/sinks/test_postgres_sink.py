"""The PostgreSQL 2PC sink driven through the template (no Spark): write-ahead batches, a ledger
on a local store, a throwaway PostgreSQL (or $BARRIERFLOW_TEST_POSTGRES_DSN)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from barrierflow.errors import SinkError
from barrierflow.local_ports import free_port
from barrierflow.sinks.postgres import PostgresSink
from barrierflow.spec.models import PostgresSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState

from tests.support.postgres_server import PostgresEndpoint

pytestmark = pytest.mark.postgres

DSN_ENV = "BF_TEST_SINK_PG_DSN"
REPO = Path(__file__).resolve().parents[2]


def rows(ids: list[int], values: list[str]) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array(values, pa.string()),
        "x": pa.array([i * 0.5 for i in ids], pa.float64()),
        "ok": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
        "ts": pa.array([datetime(2024, 1, 1, 12, 0, i % 60, tzinfo=UTC) for i in ids] if n else [],
                       pa.timestamp("us", tz="UTC")),
    })


@dataclass
class Env:
    endpoint: PostgresEndpoint
    pipeline: str
    table: str
    write_ahead_uri: str
    ledger: TransactionLedger
    admin: psycopg.Connection[Any]

    def sink(self, mode: str = "insert", attempt: int = 0, name: str = "pg", lock_timeout: float = 2.0) -> PostgresSink:
        spec = PostgresSinkSpec(type="postgres", name=name, dsn_env=DSN_ENV, table=self.table, mode=mode,
                                key_columns=["id"] if mode == "upsert" else [])
        return PostgresSink(spec=spec, write_ahead_uri=self.write_ahead_uri, name=name, pipeline=self.pipeline,
                            ledger=self.ledger, attempt=attempt, lock_timeout=lock_timeout)

    def create_table(self, primary_key: bool = False) -> None:
        pk = " PRIMARY KEY" if primary_key else ""
        self.admin.execute(f"CREATE TABLE {self.table} (id bigint{pk}, v text, x double precision, ok boolean, "
                           "ts timestamptz)")

    def visible(self) -> list[tuple[Any, ...]]:
        return self.admin.execute(f"SELECT id, v FROM {self.table} ORDER BY id, v").fetchall()

    def prepared(self) -> list[str]:
        prefix = f"bf.{self.pipeline}."
        return [r[0] for r in self.admin.execute("SELECT gid FROM pg_prepared_xacts ORDER BY gid").fetchall()
                if r[0].startswith(prefix)]

    def stage(self, batch: int, table: pa.Table, files: int = 1) -> None:
        write_ahead_batch(self.write_ahead_uri, batch, table, files=files)


@pytest.fixture
def env(postgres_endpoint: PostgresEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    monkeypatch.setenv(DSN_ENV, postgres_endpoint.dsn)
    tag = uuid.uuid4().hex[:10]
    pipeline = f"p{tag}"
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as admin:
        e = Env(postgres_endpoint, pipeline, f"events_{tag}", f"file://{tmp_path / 'staging'}",
                TransactionLedger(LocalObjectStore(tmp_path / "store"), pipeline), admin)
        try:
            yield e
        finally:
            for gid in e.prepared():  # never leave prepared transactions (they hold locks) behind
                admin.execute(f"ROLLBACK PREPARED '{gid}'")
            admin.execute(f"DROP TABLE IF EXISTS {e.table}")


def test_insert_end_to_end(env: Env) -> None:
    env.create_table()
    sink = env.sink()
    env.stage(0, rows([1, 2], ["a", "b"]), files=2)
    env.stage(1, rows([3], ["c"]))
    env.stage(2, rows([4], ["d"]))  # after the barrier: belongs to the next epoch

    handles = sink.pre_commit_epoch(1, barrier_batch=1)

    gid = f"bf.{env.pipeline}.pg.e1.a0"
    assert handles[0]["transaction_id"] == gid and handles[0]["batches"] == [0, 1] and handles[0]["rows"] == 3
    assert "password" not in str(handles) and env.endpoint.dsn not in str(handles)
    assert env.visible() == []  # durable but invisible
    assert env.prepared() == [gid] == sink.prepared_transactions()
    assert env.ledger.get("pg", 1).state is TxnState.PRECOMMITTED

    sink.notify_checkpoint_complete(1, 1)

    assert env.visible() == [(1, "a"), (2, "b"), (3, "c")]
    assert env.prepared() == []
    assert env.ledger.get("pg", 1).state is TxnState.COMMITTED
    assert sink.write_ahead.batches() == [2]  # committed batches deleted, the next epoch's kept
    typed = env.admin.execute(f"SELECT x, ok, ts FROM {env.table} WHERE id = 2").fetchone()
    assert typed == (1.0, True, datetime(2024, 1, 1, 12, 0, 2, tzinfo=UTC))
    marker = env.admin.execute("SELECT pipeline, sink, checkpoint_id FROM barrierflow_commits "
                               "WHERE transaction_id = %s", [gid]).fetchone()
    assert marker == (env.pipeline, "pg", 1)

    sink.pre_commit_epoch(2, barrier_batch=2)
    sink.notify_checkpoint_complete(2, 2)
    assert env.visible() == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_upsert_keeps_the_last_value_per_key(env: Env) -> None:
    env.create_table(primary_key=True)
    sink = env.sink("upsert")
    env.stage(0, rows([1, 2, 1], ["a", "b", "a2"]))  # a key twice in one batch: the later row wins
    env.stage(1, rows([1], ["c"]))
    sink.pre_commit_epoch(1, 1)
    sink.notify_checkpoint_complete(1, 1)
    assert env.visible() == [(1, "c"), (2, "b")]

    env.stage(2, rows([2, 3], ["d", "e"]))
    sink.pre_commit_epoch(2, 2)
    assert env.visible() == [(1, "c"), (2, "b")]
    sink.notify_checkpoint_complete(2, 2)
    assert env.visible() == [(1, "c"), (2, "d"), (3, "e")]


def test_failed_checkpoint_releases_its_prepared_epoch_to_the_next(env: Env) -> None:
    """Checkpoint 1 failed after its pre-commit: its prepared transaction is rolled back at
    once (no row locks held while waiting) and its write-ahead batch goes into epoch 2, applied
    in batch order, so the upsert ends with the newest value."""
    env.create_table(primary_key=True)
    sink = env.sink("upsert", lock_timeout=0.3)
    env.stage(0, rows([1], ["a"]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_aborted(1)
    assert env.prepared() == []
    assert env.ledger.get("pg", 1).state is TxnState.ABORTED
    env.stage(1, rows([1], ["b"]))
    sink.pre_commit_epoch(2, 1)
    assert env.ledger.get("pg", 2).batches == [0, 1]
    sink.notify_checkpoint_complete(2, 1)
    assert env.visible() == [(1, "b")]


def test_commit_twice_is_a_no_op(env: Env) -> None:
    env.create_table()
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    sink.pre_commit_epoch(1, 0)
    txn = env.ledger.get("pg", 1)
    sink.commit(txn)
    sink.commit(txn)  # the prepared transaction is gone; the marker says committed
    sink.notify_checkpoint_complete(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    assert env.visible() == [(1, "a")]
    assert env.ledger.get("pg", 1).state is TxnState.COMMITTED


def test_restore_covering_the_epoch_commits_it_from_another_process(env: Env) -> None:
    env.create_table()
    env.stage(0, rows([1, 2], ["a", "b"]))
    env.sink().pre_commit_epoch(1, 0)  # the old process pre-committed, then died

    restarted = env.sink(attempt=1)
    decisions = restarted.restore(1, 0)

    assert [(d.transaction_id, d.action) for d in decisions] == [(f"bf.{env.pipeline}.pg.e1.a0", "COMMIT")]
    assert env.visible() == [(1, "a"), (2, "b")]
    assert env.prepared() == []
    assert env.ledger.get("pg", 1).state is TxnState.COMMITTED


def test_restore_before_the_epoch_rolls_it_back_and_discards_newer_batches(env: Env) -> None:
    env.create_table()
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    env.stage(1, rows([2], ["b"]))
    env.stage(2, rows([3], ["c"]))
    sink.pre_commit_epoch(2, 2)  # pre-committed, but checkpoint 2 never completed
    env.stage(3, rows([4], ["d"]))  # staged after the barrier

    restarted = env.sink(attempt=1)
    decisions = restarted.restore(1, 0)

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(2, "ABORT")]
    assert env.visible() == [(1, "a")]
    assert env.prepared() == []
    assert env.ledger.get("pg", 2).state is TxnState.ABORTED
    assert restarted.write_ahead.batches() == []  # batches 1..3 will be replayed


def test_mid_commit_crash_then_restore_is_exactly_once(env: Env, tmp_path: Path) -> None:
    env.create_table()
    env.stage(0, rows([1, 2], ["a", "b"]))
    script = textwrap.dedent(f"""
        from barrierflow.sinks.postgres import PostgresSink
        from barrierflow.spec.models import PostgresSinkSpec
        from barrierflow.storage.local import LocalObjectStore
        from barrierflow.transactions.ledger import TransactionLedger
        spec = PostgresSinkSpec(type="postgres", name="pg", dsn_env={DSN_ENV!r}, table={env.table!r})
        ledger = TransactionLedger(LocalObjectStore({str(tmp_path / 'store')!r}), {env.pipeline!r})
        sink = PostgresSink(spec=spec, write_ahead_uri={env.write_ahead_uri!r}, name="pg", pipeline={env.pipeline!r},
                            ledger=ledger)
        sink.pre_commit_epoch(1, 0)
        sink.notify_checkpoint_complete(1, 0)
        raise SystemExit("not reached: the crash point should have killed this process")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BARRIERFLOW_CRASH_AT": "mid_sink_commit"})
    assert proc.returncode == -9, proc.stderr
    assert env.visible() == [(1, "a"), (2, "b")]  # COMMIT PREPARED ran ...
    assert env.ledger.get("pg", 1).state is TxnState.PRECOMMITTED  # ... the ledger was not told

    decisions = env.sink(attempt=1).restore(1, 0)

    assert [d.action for d in decisions] == ["COMMIT"]
    assert env.visible() == [(1, "a"), (2, "b")]
    assert env.ledger.get("pg", 1).state is TxnState.COMMITTED


def test_orphan_prepared_transaction_is_found_and_rolled_back(env: Env) -> None:
    env.create_table()
    orphan = f"bf.{env.pipeline}.pg.e7.a0"
    other_sink = f"bf.{env.pipeline}.pgx.e1.a0"  # a sink whose name starts like ours: not ours
    for gid, row_id in ((orphan, 1), (other_sink, 2)):
        with psycopg.connect(env.endpoint.dsn, autocommit=True) as conn:
            conn.execute("BEGIN")
            conn.execute(f"INSERT INTO {env.table} (id, v) VALUES ({row_id}, 'orphan')")
            conn.execute(f"PREPARE TRANSACTION '{gid}'")
    sink = env.sink()

    running = sink.plan(None, restoring=False)
    assert [(d.transaction_id, d.action) for d in running] == [(orphan, "NONE")]
    decisions = sink.plan(None, restoring=True)
    assert [(d.transaction_id, d.state, d.action) for d in decisions] == [(orphan, "EXTERNAL", "ABORT")]
    sink.apply(decisions)

    assert env.prepared() == [other_sink]
    assert sink.prepared_transactions() == []
    assert env.visible() == []


def test_failed_pre_commit_leaves_nothing_prepared_and_keeps_the_batches(env: Env) -> None:
    env.admin.execute(f"CREATE TABLE {env.table} (id bigint, v text)")  # lacks x, ok, ts
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    with pytest.raises(SinkError, match="column"):
        sink.pre_commit_epoch(1, 0)
    assert env.prepared() == []
    sink.notify_checkpoint_aborted(1)
    assert env.ledger.get("pg", 1).state is TxnState.ABORTED

    env.admin.execute(f"ALTER TABLE {env.table} ADD COLUMN x double precision, ADD COLUMN ok boolean, "
                      "ADD COLUMN ts timestamptz")
    assert sink.pre_commit_epoch(2, 0)[0]["batches"] == [0]  # the batch went to the next epoch
    sink.notify_checkpoint_complete(2, 0)
    assert env.visible() == [(1, "a")]


def test_commit_of_a_transaction_rolled_back_behind_our_back_fails_clearly(env: Env) -> None:
    env.create_table()
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    sink.pre_commit_epoch(1, 0)
    env.admin.execute(f"ROLLBACK PREPARED 'bf.{env.pipeline}.pg.e1.a0'")
    with pytest.raises(SinkError, match="rolled back") as err:
        sink.notify_checkpoint_complete(1, 0)
    assert "older than 1" in str(err.value)
    assert env.ledger.get("pg", 1).state is TxnState.PRECOMMITTED
    assert sink.write_ahead.batches() == [0]  # the write-ahead log is kept


def test_missing_table_names_it_and_the_fix(env: Env) -> None:
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    with pytest.raises(SinkError, match=f"table {env.table} does not exist") as err:
        sink.pre_commit_epoch(1, 0)
    assert "CREATE TABLE" in str(err.value)
    assert env.prepared() == []


def test_missing_dsn_variable_names_it(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV)
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    with pytest.raises(SinkError, match=DSN_ENV) as err:
        sink.pre_commit_epoch(1, 0)
    assert "not set" in str(err.value)


def test_dead_server_error_names_host_and_port_but_not_the_password(env: Env,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens there
    password = "s3cr3t-Pa55word"
    monkeypatch.setenv(DSN_ENV, f"postgresql://bfuser:{password}@127.0.0.1:{port}/nodb")
    sink = env.sink()
    env.stage(0, rows([1], ["a"]))
    with pytest.raises(SinkError) as err:
        sink.pre_commit_epoch(1, 0)
    text = str(err.value)
    assert f"127.0.0.1:{port}/nodb" in text and DSN_ENV in text
    assert password not in text and "bfuser:" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__
