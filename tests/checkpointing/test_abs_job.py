"""ABS on a real Structured Streaming query (shared local SparkSession)."""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import TolerableFailuresExceededError
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import parse_spec
from barrierflow.storage import open_store
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import FailingObjectStore, SlowObjectStore

from tests.pipeline_specs import make_spec, spec_dict

pytestmark = pytest.mark.spark


def _commit_times(work: Path) -> dict[int, float]:
    commits = work / "spark-checkpoint" / "commits"
    return {int(n): (commits / n).stat().st_mtime for n in os.listdir(commits) if n.isdigit()}


@pytest.mark.s3
def test_async_upload_to_s3_does_not_block_processing(spark, tmp_path: Path, s3_store_uri: str) -> None:
    spec = make_spec(tmp_path, checkpoint={"storage": s3_store_uri, "interval": "300ms"})
    commits = tmp_path / "work" / "spark-checkpoint" / "commits"
    # Each checkpoint's upload waits until Spark commits another micro-batch: if uploading
    # held processing up, no checkpoint could complete (the store fails it after 120 s).
    slow = SlowObjectStore(open_store(s3_store_uri), delay=0.5,
                           progress=lambda: len(_commit_times(tmp_path / "work")) if commits.is_dir() else 0)
    result = StreamingJob(spec, spark=spark, checkpoint_objects=slow).run(checkpoints=3, duration=240)
    assert len(result.completed) == 3, result.failed
    assert slow.manifest_violations == []
    # The manifest is the last write of its checkpoint: every shared file was stored before it.
    written = {w.key: w.finished for w in slow.writes}
    for m in result.completed:
        manifest_at = written[f"chk-{m.checkpoint_id}/_metadata.json"]
        for f in m.files:
            if f.uploaded:
                assert written[f"shared/{f.sha256[:2]}/{f.sha256}"] <= manifest_at
    # Micro-batches kept completing while each checkpoint's files were uploading.
    times = _commit_times(tmp_path / "work")
    during = [
        [b for b, t in times.items()
         if b > m.spark_batch_id and m.barrier_time.timestamp() < t < m.completion_time.timestamp()]
        for m in result.completed
    ]
    assert all(m.async_ms >= 500 for m in result.completed)
    assert all(len(d) >= 1 for d in during), during
    listed = CheckpointStore(open_store(s3_store_uri), spec.name).checkpoint_ids()
    assert listed == [m.checkpoint_id for m in result.completed]


def test_failed_uploads_never_complete_and_stop_the_job(spark, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, checkpoint={"tolerable_failed_checkpoints": 1, "interval": "300ms"})
    failing = FailingObjectStore(LocalObjectStore(tmp_path / "checkpoints"), failing=False)
    store = CheckpointStore(failing, spec.name)

    def inject(job: StreamingJob) -> None:  # let checkpoint 1 complete, then break the store
        if job.coordinator and job.coordinator.completed:
            failing.failing = True

    with pytest.raises(TolerableFailuresExceededError) as info:
        StreamingJob(spec, spark=spark, checkpoint_objects=failing).run(duration=240, on_tick=inject)
    assert info.value.failures == 2
    assert store.checkpoint_ids() == [1]
    failed = [f for f in store.failures() if f.reason.value == "UPLOAD_FAILED"]
    assert [f.checkpoint_id for f in failed] == [2, 3]
    assert all("injected failure" in f.message for f in failed)
    # Anything else recorded is a checkpoint abandoned because the job stopped.
    assert {f.reason.value for f in store.failures()} <= {"UPLOAD_FAILED", "JOB_STOPPED"}


def test_unchanged_state_uploads_a_small_fraction(spark, tmp_path: Path) -> None:
    # Run 1: batches of 40,000 records fill 20,000 keys of state, checkpointed once.
    big = make_spec(tmp_path, source={"keys": 20_000, "max_records_per_batch": 20_000},
                    checkpoint={"interval": "100ms"})
    first = StreamingJob(big, spark=spark).run(checkpoints=1, duration=240)
    assert len(first.completed) == 1
    # Run 2 (same job, continued): a trickle of records touches a few keys per batch.
    small = make_spec(tmp_path, source={"keys": 20_000, "rows_per_second": 20, "max_records_per_batch": 50},
                      checkpoint={"interval": "1s"})
    second = StreamingJob(small, spark=spark).run(checkpoints=3, duration=240)
    assert len(second.completed) == 3
    full = first.completed[0]
    # The first checkpoint of run 2 may still carry full-size deltas written after
    # checkpoint 1; from then on only the trickle's deltas are new.
    for m in second.completed[1:]:
        ratio = m.incremental_bytes / m.full_bytes
        assert m.full_bytes >= full.full_bytes
        assert ratio < 0.05, f"checkpoint {m.checkpoint_id} uploaded {m.incremental_bytes} of {m.full_bytes} B"


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
    assert not list((tmp_path / "out").glob("_staging/batch=*/*.parquet")) or max(seen_staged) > last.spark_batch_id
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
