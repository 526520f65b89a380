"""Exactly-once with watermark alignment on: the crash harness over an aligned, skewed
pipeline (partition 1 two seconds behind in event time, max_drift below the watermark delay).
After a crash at a protocol point and recovery, the committed windows equal the failure-free
output, which with alignment is exactly the windows computed from the generator's records
(nothing is dropped as late)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.sinks.parquet import read_committed

from tests.scenarios.harness import closed_second_windows, crashed_run, finish, recover, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
RECORDS = 3000
DELAY = 0.2


def aligned_spec(tmp_path: Path) -> Path:
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"},
                         records=RECORDS, per_batch=400)
    data = yaml.safe_load(path.read_text())
    data["sources"][0]["event_time_skew_ms"] = [0, -2000]
    data["event_time"] = {"column": "event_time", "watermark_delay": "200ms", "idle_timeout": "500ms",
                          "alignment": {"max_drift": "100ms", "update_interval": "0s"}}
    path.write_text(yaml.safe_dump(data))
    return path


def expected_rows(spec_path: Path) -> list[tuple[Any, ...]]:
    """The windows closed by the final watermark, computed from the generator's records."""
    return closed_second_windows(spec_path, RECORDS, DELAY, naive=True)


def test_crashes_over_an_aligned_skewed_pipeline_stay_exactly_once(spark, tmp_path: Path) -> None:
    spec_path = aligned_spec(tmp_path)
    ways = []
    # One crash (each crashed run starts a driver JVM; the full matrix of points runs in
    # test_random_crashes.py): after the pre-commit of the second checkpoint, so the restore
    # goes back to checkpoint 1 and the aligned pipeline replays from there.
    for point in ("after_precommit@2",):
        crashed = crashed_run(spec_path, point)
        if crashed.returncode == 0:
            continue
        assert crashed.returncode == -9, crashed.stderr[-3000:]
        ways.append(recover(spec_path))
    assert ways, "no crash point was reached"
    finish(spark, spec_path)
    table = read_committed(f"file://{tmp_path / 'out'}")
    rows = window_rows(table.to_pylist() if table is not None else [])
    committed = [(s[:19], e[:19], *rest) for s, e, *rest in rows]
    expected = [(s[:19], e[:19], *rest) for s, e, *rest in expected_rows(spec_path)]
    print(f"\naligned crash harness: {len(ways)} crashes ({', '.join(ways)}), {len(committed)} committed windows")
    assert committed == expected
