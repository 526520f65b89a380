"""Exactly-once into PostgreSQL (PREPARE TRANSACTION / COMMIT PREPARED) across SIGKILLed drivers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.recovery.harness import crash_at_every_point, finish, window_rows, windowed_spec
from tests.recovery.test_exactly_once_files import RECORDS

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.timeout(900), pytest.mark.slow(200)]


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


def test_crash_at_every_point_restore_finish(spark, tmp_path: Path, reference_rows, pg_table) -> None:
    dsn, table = pg_table
    spec_path = _spec(tmp_path, table, RECORDS, 300)
    reference = _reference(reference_rows, RECORDS)

    def committed() -> list[tuple[Any, ...]]:
        assert _prepared(dsn) == [], "recovery left prepared transactions"
        return _rows(dsn, table)

    ways = crash_at_every_point(spec_path, committed, reference)
    assert "restore" in ways
    finish(spark, spec_path)
    assert _rows(dsn, table) == reference
    assert _prepared(dsn) == []
