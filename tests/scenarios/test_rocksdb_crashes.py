"""Exactly-once with Spark's RocksDB state store provider (``spark.state_store: rocksdb``,
barrierflow's default settings: one zip per version, no changelogs): SIGKILLed drivers,
restores, and the committed output equals the failure-free run's (computed with the
HDFS-backed provider: the output must not depend on the provider).

Which crash tests run per provider: every crash test of tests/scenarios/ runs with the
HDFS-backed provider (the default). With RocksDB this one runs the two protocol points
where the state store's files matter, on one pipeline, one driver each (about a minute of
the suite's time on a quiet machine instead of doubling its ~20 minutes):

- ``during_upload@2``: the driver dies while checkpoint 2 uploads its zip and SST files;
  the restore must take checkpoint 1, whose files load its barrier version, and ignore the
  partial upload (shared files of a checkpoint that never completed);
- ``after_manifest@2``: the newest checkpoint is complete when the driver dies; the restore
  materializes its RocksDB files into a fresh Spark checkpoint and the job continues from
  the barrier version they load.

The sink-side points (``mid_epoch``, ``after_precommit``, ``mid_sink_commit``) act on the
sink's transactions, not on state files; they stay HDFS-only (test_random_crashes.py).
Changelog checkpointing (off by default) is covered by tests/checkpointing/test_rocksdb_state.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.scenarios.harness import assert_sub_multiset, crashed_run, finish, recover, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900), pytest.mark.slow(60)]
RECORDS = 6000  # the size the other recovery tests use: the failure-free reference is shared


def rocksdb_spec(tmp_path: Path) -> Path:
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"},
                         records=RECORDS)
    data = yaml.safe_load(path.read_text())
    data["spark"]["state_store"] = "rocksdb"
    path.write_text(yaml.safe_dump(data))
    return path


def test_crashes_with_the_rocksdb_state_store_stay_exactly_once(
        spark: Any, tmp_path: Path, reference_rows: Callable[[int], list[tuple[Any, ...]]]) -> None:
    spec_path = rocksdb_spec(tmp_path)
    assert load_spec(spec_path).spark.state_store == "rocksdb"
    reference = reference_rows(RECORDS)
    out = tmp_path / "out"

    def committed() -> list[tuple[Any, ...]]:
        table = read_committed(f"file://{out}")
        return window_rows(table.to_pylist() if table is not None else [])

    ways = []
    for point in ("during_upload@2", "after_manifest@2"):
        crashed = crashed_run(spec_path, point)
        assert crashed.returncode == -9, f"{point}: exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
        ways.append(recover(spec_path))
        assert_sub_multiset(committed(), reference, f"a crash at {point} and {ways[-1]}")
    assert ways == ["restore", "restore"]
    state = tmp_path / "work" / "spark-checkpoint" / "state" / "0"
    assert any(state.rglob("*.zip")), "the restored job has no RocksDB state files"
    finish(spark, spec_path)
    assert committed() == reference
