"""Exactly-once into the Parquet file sink across SIGKILLed drivers at every protocol point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.sinks.parquet import read_committed
from barrierflow.testing.crash import POINTS

from tests.recovery.harness import crashed_run, finish, recover, window_rows, windowed_spec

pytestmark = [pytest.mark.spark]
RECORDS = 3000

#: Which hit of each point to crash at: late enough that a checkpoint usually completed.
CRASH_AT = {"mid_epoch": "mid_epoch@5", "during_upload": "during_upload@2", "after_precommit": "after_precommit@2",
            "after_manifest": "after_manifest@2", "mid_sink_commit": "mid_sink_commit@1"}


def _committed(out: Path) -> list[tuple[Any, ...]]:
    table = read_committed(f"file://{out}")
    return window_rows(table.to_pylist() if table is not None else [])


@pytest.mark.parametrize("point", POINTS)
def test_crash_restore_finish_equals_failure_free_output(spark, tmp_path: Path, reference_rows, point: str) -> None:
    out = tmp_path / "out"
    spec_path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"}, records=RECORDS,
                              per_batch=600)
    crashed = crashed_run(spec_path, CRASH_AT[point])
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert f"injected crash at {point}" in crashed.stderr
    recover(spec_path)
    finish(spark, spec_path)
    assert _committed(out) == reference_rows(RECORDS)
    assert not list((out / "_staging").glob("batch=*/*.parquet")), "staged files left after the last commit"
