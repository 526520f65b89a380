"""A randomized run: 20 crash/restore cycles over two pipelines, one writing Parquet files
and one writing PostgreSQL, crashing alternately at random protocol points; both outputs
must equal the failure-free output at the end."""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from barrierflow.faults import STAGE_POINTS
from barrierflow.sinks.parquet import read_committed

from tests.recovery.harness import crashed_run, finish, recover, window_rows, windowed_spec
from tests.recovery.test_exactly_once_postgres import _prepared, _reference, _rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.timeout(1500), pytest.mark.slow(480)]
RECORDS = 12000
CYCLES = 20


def test_twenty_random_crash_restore_cycles_file_and_postgres(
        spark, tmp_path: Path, reference_rows, postgres_endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    table = f"eo_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_endpoint.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (window_start timestamptz, window_end timestamptz, key bigint, "
                     "count bigint, value_sum bigint)")
    monkeypatch.setenv("BARRIERFLOW_POSTGRES_DSN", postgres_endpoint.dsn)
    out = tmp_path / "files" / "out"
    (tmp_path / "files").mkdir()
    (tmp_path / "pg").mkdir()
    pipelines = {
        "files": windowed_spec(tmp_path / "files", {"name": "out", "type": "parquet", "path": f"file://{out}"},
                               records=RECORDS, per_batch=200),
        "postgres": windowed_spec(tmp_path / "pg", {"name": "pg", "type": "postgres", "table": table},
                                  records=RECORDS, per_batch=200),
    }
    rng = random.Random(20261122)
    crashes: dict[str, int] = {"files": 0, "postgres": 0}
    ways: list[str] = []
    for _attempt in range(CYCLES + 10):
        if sum(crashes.values()) >= CYCLES:
            break
        sink = min(crashes, key=lambda k: crashes[k])  # alternate, so each sink gets half
        point = rng.choice(STAGE_POINTS)
        crashed = crashed_run(pipelines[sink], f"{point}@{rng.randint(1, 3)}")
        if crashed.returncode == 0:
            continue  # the point was not reached before the bounded source ended
        assert crashed.returncode == -9, crashed.stderr[-3000:]
        crashes[sink] += 1
        ways.append(recover(pipelines[sink]))
        if sink == "postgres":
            assert _prepared(postgres_endpoint.dsn) == []
    assert sum(crashes.values()) >= CYCLES, crashes
    assert "restore" in ways
    for spec_path in pipelines.values():
        finish(spark, spec_path)
    table_out = read_committed(f"file://{out}")
    assert window_rows(table_out.to_pylist() if table_out is not None else []) == reference_rows(RECORDS)
    assert _rows(postgres_endpoint.dsn, table) == _reference(reference_rows, RECORDS)
    assert _prepared(postgres_endpoint.dsn) == []
