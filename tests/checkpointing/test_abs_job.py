"""ABS on a real Structured Streaming query (shared local SparkSession)."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import TolerableFailuresExceededError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spark import commit_log
from barrierflow.storage import open_store
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import FailingObjectStore, SlowObjectStore

from tests.pipeline_specs import make_spec

pytestmark = pytest.mark.spark


def _committed_batches(work: Path) -> int:
    """Micro-batches Spark committed so far: the newest ``commits/<V>`` plus one (0 before the
    first). Not the number of commit files: Spark deletes all but the newest
    ``minBatchesToRetain`` (100), so their count stops growing once a run is that long, and a
    file listed may be gone before it is looked at."""
    newest = commit_log.latest_committed(work / "spark-checkpoint")
    return 0 if newest is None else newest + 1


@pytest.mark.s3
def test_async_upload_to_s3_does_not_block_processing(spark, tmp_path: Path, s3_store_uri: str) -> None:
    # Each checkpoint's upload waits until Spark commits two more micro-batches (the first may be
    # the barrier batch's own commit, written just after the upload started): if uploading held
    # processing up, no checkpoint could complete. The bounds are there only to end such a
    # deadlock, never to time a healthy run: the gate fails the upload, naming it, when two
    # micro-batches took 120 s; the checkpoint's own timeout is later, so the gate's message
    # is what a blocking upload fails with; and the run has no duration limit (it ends after
    # its 3 checkpoints, or on the first failed one: none is tolerated).
    progress_timeout = 120.0
    spec = make_spec(tmp_path, checkpoint={"storage": s3_store_uri, "interval": "300ms",
                                           "timeout": f"{progress_timeout + 60:g}s"})
    slow = SlowObjectStore(open_store(s3_store_uri), delay=0.5, progress_steps=2,
                           progress=lambda: _committed_batches(tmp_path / "work"), progress_timeout=progress_timeout)
    result = StreamingJob(spec, spark=spark, checkpoint_objects=slow).run(checkpoints=3)
    assert len(result.completed) == 3, result.failed
    assert slow.manifest_violations == []
    # The manifest is the last write of its checkpoint: every shared file was stored before it.
    written = {w.key: w.finished for w in slow.writes}
    for m in result.completed:
        manifest_at = written[f"chk-{m.checkpoint_id}/_metadata.json"]
        for f in m.files:
            if f.uploaded:
                assert written[f"shared/{f.sha256[:2]}/{f.sha256}"] <= manifest_at
    # Micro-batches kept committing while each checkpoint's files were uploading: every
    # checkpoint's upload was held until Spark committed two more batches, and then completed.
    # (Judged by the store's own wait, not by comparing commit files' mtimes with the manifests'
    # barrier and completion times: in a loaded CI run two checkpoints of three showed no commit
    # inside that window, the barrier time being when the driver got round to the barrier batch.)
    assert len(slow.progress_waits) == 3, slow.progress_waits
    assert all(w.reached >= w.start + 2 for w in slow.progress_waits), slow.progress_waits
    assert all(m.async_ms >= 500 for m in result.completed)
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
