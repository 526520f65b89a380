"""Exactly-once with watermark alignment on: the crash harness over an aligned, skewed
pipeline (partition 1 two seconds behind in event time, max_drift below the watermark delay).
After a crash at a protocol point and recovery, the committed windows equal the failure-free
output, which with alignment is exactly the windows computed from the generator's records
(nothing is dropped as late)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import load_spec

from tests.scenarios.harness import crashed_run, finish, recover, window_rows, windowed_spec

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
    spec = load_spec(spec_path)
    model = GeneratorModel(spec.source)
    groups: dict[tuple[datetime, int], list[int]] = defaultdict(lambda: [0, 0])
    newest = max(model.max_event_time(p, RECORDS) for p in range(2))
    for p in range(2):
        for _p, _o, key, value, t in model.rows(p, 0, RECORDS):
            start = datetime.fromtimestamp(t.timestamp() // 1, UTC)
            groups[(start, key)][0] += 1
            groups[(start, key)][1] += value
    closed = newest - timedelta(seconds=DELAY)
    return window_rows([{"window_start": s.replace(tzinfo=None), "window_end": (s + timedelta(seconds=1)).replace(
        tzinfo=None), "key": k, "count": c, "value_sum": v}
        for (s, k), (c, v) in groups.items() if s + timedelta(seconds=1) <= closed])


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
