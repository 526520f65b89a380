"""Exactly-once into PostgreSQL (PREPARE TRANSACTION / COMMIT PREPARED) across SIGKILLed drivers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from barrierflow.testing.crash import POINTS

from tests.recovery.harness import crashed_run, finish, recover, window_rows, windowed_spec
from tests.recovery.test_exactly_once_files import CRASH_AT, RECORDS

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def pg_table(postgres_endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    table = f"eo_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (window_start timestamptz, window_end timestamptz, key bigint, "
                     "count bigint, value_sum bigint)")
    monkeypatch.setenv("BARRIERFLOW_POSTGRES_DSN", postgres_endpoint.dsn)
    return postgres_endpoint.dsn, table


def _rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(f"SELECT window_start AT TIME ZONE 'UTC', window_end AT TIME ZONE 'UTC', key, count, "
                           f"value_sum FROM {table}")
        return window_rows([dict(zip(["window_start", "window_end", "key", "count", "value_sum"], r, strict=True))
                            for r in cur.fetchall()])


def _prepared(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def _reference(reference_rows: Any, records: int) -> list[tuple[Any, ...]]:
    # Parquet keeps timestamps as UTC instants; PostgreSQL returns them naive in UTC above.
    return sorted((ws.replace("+00:00", ""), we.replace("+00:00", ""), *rest)
                  for ws, we, *rest in reference_rows(records))


def _spec(tmp_path: Path, table: str, records: int, per_batch: int) -> Path:
    return windowed_spec(tmp_path, {"name": "pg", "type": "postgres", "table": table, "mode": "insert"},
                         records=records, per_batch=per_batch)


@pytest.mark.parametrize("point", POINTS)
def test_crash_restore_finish_equals_failure_free_output(spark, tmp_path: Path, reference_rows, pg_table,
                                                         point: str) -> None:
    dsn, table = pg_table
    spec_path = _spec(tmp_path, table, RECORDS, 600)
    crashed = crashed_run(spec_path, CRASH_AT[point])
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert f"injected crash at {point}" in crashed.stderr
    recover(spec_path)
    assert _prepared(dsn) == [], "reconciliation left prepared transactions"
    finish(spark, spec_path)
    assert _rows(dsn, table) == _reference(reference_rows, RECORDS)
    assert _prepared(dsn) == []
