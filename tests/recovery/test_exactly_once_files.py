"""Exactly-once into the Parquet file sink across SIGKILLed drivers: one pipeline crashes at
every named protocol point in turn, recovering after each, then runs to the end; the committed
rows must equal the failure-free run's rows (checked for duplicates after every recovery)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.sinks.parquet import read_committed

from tests.recovery.harness import crash_at_every_point, finish, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900), pytest.mark.slow(200)]
RECORDS = 6000


def committed_files(out: Path) -> list[tuple[Any, ...]]:
    table = read_committed(f"file://{out}")
    return window_rows(table.to_pylist() if table is not None else [])


def test_crash_at_every_point_restore_finish(spark, tmp_path: Path, reference_rows) -> None:
    out = tmp_path / "out"
    spec_path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                              records=RECORDS, per_batch=300)
    reference = reference_rows(RECORDS)
    ways = crash_at_every_point(spec_path, lambda: committed_files(out), reference)
    assert "restore" in ways
    finish(spark, spec_path)
    assert committed_files(out) == reference
    assert not list((out / "_staging").glob("batch=*/*.parquet")), "staged files left after the last commit"
