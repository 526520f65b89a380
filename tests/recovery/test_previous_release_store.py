"""A single-stage checkpoint store written by the previous release restores under this code.

The one pipeline model must not move a single-stage pipeline's files (``chk-<n>`` at the
store's root, ``shared/``, the transaction ledger, the staged and committed output), so an
existing store needs no migration. ``previous_release/store`` was made by
``previous_release/make_store.py`` with the code of 57293b5: two checkpoints of keyed
event-time windows over a bounded generator, with part of the output committed. Here it is
copied to a fresh machine (no work dir, no Spark checkpoint) and run to the end of the source
with this code: it restores the newest checkpoint, and the committed windows equal the counts
computed directly from the generator, each window once.
"""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import parse_spec

from tests.recovery.previous_release.make_store import spec_for

pytestmark = [pytest.mark.spark, pytest.mark.slow(25)]

FIXTURE = Path(__file__).parent / "previous_release" / "store"


def test_a_single_stage_store_of_the_previous_release_restores_exactly_once(spark: Any, tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "chk", tmp_path / "chk")
    if (FIXTURE / "out").exists():  # the fixture's run committed no output file (git keeps no empty dirs)
        shutil.copytree(FIXTURE / "out", tmp_path / "out")
    spec = parse_spec(spec_for(tmp_path))
    job = StreamingJob(spec, spark=spark)
    before = job.store.checkpoint_ids()
    assert before, "the fixture holds no completed checkpoint"
    committed_before = read_committed(spec.sink.path)
    result = job.run(until_exhausted=True, duration=300)
    assert result.elapsed_seconds < 300
    assert result.completed[0].checkpoint_id == max(before) + 1  # continued from the restored checkpoint
    assert result.completed[-1].attempt >= 1  # restored: a new attempt of the same pipeline

    model = GeneratorModel(spec.source)
    records = spec.source.records_per_partition
    assert records is not None
    direct: Counter[tuple[datetime, int]] = Counter()
    for p in range(spec.source.partitions):
        for _p, _o, key, _v, event_time in model.rows(p, 0, records):
            direct[(datetime.fromtimestamp(event_time.timestamp() // 10 * 10, UTC), key)] += 1
    newest = max(model.max_event_time(p, records) for p in range(spec.source.partitions))
    closed = {k: c for k, c in direct.items() if k[0] + timedelta(seconds=10) <= newest - timedelta(seconds=5)}
    table = read_committed(spec.sink.path)
    assert table is not None
    got: dict[tuple[datetime, int], int] = {}
    for row in table.to_pylist():
        start = row["window_start"] if row["window_start"].tzinfo else row["window_start"].replace(tzinfo=UTC)
        assert (start, row["key"]) not in got, f"window {start} key {row['key']} committed twice"
        got[(start, row["key"])] = row["count"]
    rows_before = committed_before.num_rows if committed_before is not None else 0
    print(f"\nprevious-release store: checkpoints {before} restored; {rows_before} windows committed before, "
          f"{len(got)} after; {len(closed)} closed windows expected")
    assert rows_before < len(closed)  # the rest comes from the run under this code
    assert {k: got.get(k) for k in closed} == closed
    assert set(got) <= set(direct)
