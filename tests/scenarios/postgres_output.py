"""Reading a PostgreSQL sink's committed output and its in-doubt transactions in tests."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from tests.scenarios.harness import window_rows


def create_window_table(dsn: str) -> str:
    """A fresh table for the windowed pipeline's rows; returns its name."""
    table = f"eo_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (window_start timestamptz, window_end timestamptz, key bigint, "
                     "count bigint, value_sum bigint)")
    return table


def committed_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as sorted comparable tuples (see :func:`window_rows`)."""
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(f"SELECT window_start AT TIME ZONE 'UTC', window_end AT TIME ZONE 'UTC', key, count, "
                           f"value_sum FROM {table}")
        return window_rows([dict(zip(["window_start", "window_end", "key", "count", "value_sum"], r, strict=True))
                            for r in cur.fetchall()])


def prepared_transactions(dsn: str) -> list[str]:
    """The gids in ``pg_prepared_xacts`` (empty once every transaction is resolved)."""
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


def as_postgres_rows(reference: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Parquet keeps timestamps as UTC instants; PostgreSQL returns them naive in UTC above."""
    return sorted((ws.replace("+00:00", ""), we.replace("+00:00", ""), *rest) for ws, we, *rest in reference)
