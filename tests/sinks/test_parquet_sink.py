"""The Parquet sink (barrierflow.sinks.parquet) on a real Structured Streaming query (shared
local SparkSession): output is staged per batch and published only for completed checkpoints."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import parse_spec

from tests.pipeline_specs import spec_dict

pytestmark = pytest.mark.spark


def test_parquet_output_is_published_only_for_completed_checkpoints(spark, tmp_path: Path) -> None:
    data = spec_dict(tmp_path, source={"partitions": 2, "max_records_per_batch": 300, "keys": 50})
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    spec = parse_spec(data)
    job = StreamingJob(spec, spark=spark)
    seen_staged: list[int] = []

    def watch(job: StreamingJob) -> None:
        staged = (tmp_path / "out" / "_staging").glob("batch=*/_PRECOMMITTED.json")
        seen_staged.extend(int(p.parent.name.split("=")[1]) for p in staged)

    result = job.run(checkpoints=3, duration=240, on_tick=watch)
    assert len(result.completed) == 3
    last = result.completed[-1]
    files = sorted((tmp_path / "out").glob("part-*.parquet"))
    published_batches = {int(f.name.split("-")[1]) for f in files}
    assert published_batches and max(published_batches) <= last.spark_batch_id
    assert seen_staged, "batches are pre-committed into _staging before they are published"
    # What is left written ahead once the run stopped is after the last checkpoint's barrier (the
    # stop lets the batch in flight end): the next run's first epoch takes it.
    left = {int(f.parent.name.split("=")[1]) for f in (tmp_path / "out").glob("_staging/batch=*/*.parquet")}
    assert all(batch > last.spark_batch_id for batch in left), (left, last.spark_batch_id)
    # Exact: the newest published row per key equals the totals of every generated record
    # up to the last completed barrier (update mode emits each changed key per batch).
    latest: dict[int, tuple[int, int, int]] = {}
    for f in files:
        batch = int(f.name.split("-")[1])
        for row in pq.read_table(f).to_pylist():
            if row["key"] not in latest or latest[row["key"]][0] <= batch:
                latest[row["key"]] = (batch, row["count"], row["value_sum"])
    model = GeneratorModel(spec.source)
    counts: Counter[int] = Counter()
    sums: Counter[int] = Counter()
    for p, end in last.barrier_offsets["events"].items():
        for _p, _o, key, value, _t in model.rows(int(p), 0, end):
            counts[key] += 1
            sums[key] += value
    assert {k: (c, s) for k, (_b, c, s) in latest.items()} == {k: (counts[k], sums[k]) for k in counts}
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None and table.num_rows == sum(pq.read_metadata(f).num_rows for f in files)
    assert isinstance(last.completion_time, datetime) and last.completion_time.tzinfo is not None
