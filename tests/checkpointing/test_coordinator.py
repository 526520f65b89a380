"""The coordinator's protocol and timing rules, on a hand-written Spark checkpoint dir and
a real local checkpoint store, with an injected clock (no Spark needed)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.checkpointing.manifest import FailureReason
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import TolerableFailuresExceededError
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import FailingCommitter, FailingObjectStore
from barrierflow.transactions.committer import SinkCommitter

from tests.checkpointing.fake_spark import FakeSparkCheckpoint


class RecordingSink(SinkCommitter):
    name = "rec"

    def __init__(self) -> None:
        self.completed: list[tuple[int, int]] = []

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict]:
        return [{"sink": "rec", "upto": barrier_batch}]

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        self.completed.append((checkpoint_id, barrier_batch))


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _coordinator(tmp_path: Path, objects=None, clock: Clock | None = None, sinks=None, **options):
    spark = FakeSparkCheckpoint(tmp_path / "spark")
    store = CheckpointStore(objects or LocalObjectStore(tmp_path / "store"), "p")
    opts = CheckpointSpec(storage="file://unused", **{"interval": 1.0, "timeout": 10.0, **options})
    coordinator = CheckpointCoordinator(
        pipeline="p", options=opts, store=store, spark_checkpoint_dir=spark.root,
        snapshot_dir=tmp_path / "staging", control=ControlChannel(tmp_path / "control"),
        source_names=["events"], sinks=sinks, monotonic=clock or Clock(),
    )
    coordinator.start()
    return coordinator, spark, store


def _wait_uploads(coordinator: CheckpointCoordinator) -> list:
    events = []
    for pending in list(coordinator.pending.values()):
        if pending.upload is not None:
            pending.upload.exception(timeout=10)
    events += coordinator.tick()
    coordinator.flush_sinks()
    return events


def test_trigger_barrier_snapshot_upload_manifest_notify(tmp_path: Path) -> None:
    clock = Clock()
    sink = RecordingSink()
    coordinator, spark, store = _coordinator(tmp_path, clock=clock, sinks=[sink])
    control = ControlChannel(tmp_path / "control")
    coordinator.tick()
    assert control.requested_barrier() == 0  # interval not yet elapsed
    clock.t += 1.0
    coordinator.tick()
    assert control.requested_barrier() == 1
    spark.run_batch(0, {"0": 10, "1": 10}, barrier=0)
    spark.run_batch(1, {"0": 20, "1": 20}, barrier=1)  # the barrier batch of checkpoint 1
    spark.run_batch(2, {"0": 30, "1": 30}, barrier=1)  # a later batch: not part of checkpoint 1
    coordinator.tick()
    events = _wait_uploads(coordinator)
    assert [e.checkpoint_id for e in events if e.completed] == [1]
    manifest = store.get(1)
    assert manifest.spark_batch_id == 1 and manifest.state_version == 2 and manifest.first_batch_id == 0
    assert manifest.barrier_offsets == {"events": {"0": 20, "1": 20}}
    paths = {f.path for f in manifest.files}
    assert {"metadata", "offsets/0", "offsets/1", "commits/0", "commits/1", "state/0/0/1.delta",
            "state/0/0/2.delta", "state/0/1/2.delta", "state/0/0/_metadata/schema",
            "state/0/_metadata/metadata"} <= paths
    assert "offsets/2" not in paths and "state/0/0/3.delta" not in paths
    assert manifest.sink_handles == [{"sink": "rec", "upto": 1}]
    assert sink.completed == [(1, 1)]
    unique = {f.sha256: f.size for f in manifest.files}
    assert manifest.incremental_bytes == sum(unique.values()) > 0  # identical files stored once
    assert manifest.full_bytes == sum(f.size for f in manifest.files)
    for f in manifest.files:  # every referenced file is stored, content-addressed
        assert store.objects.size(f"shared/{f.sha256[:2]}/{f.sha256}") == f.size
    assert not (tmp_path / "staging" / "chk-1").exists()


def test_second_checkpoint_uploads_only_new_files(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, spark, store = _coordinator(tmp_path, clock=clock)
    clock.t += 1.0
    coordinator.tick()
    spark.run_batch(0, {"0": 10}, barrier=1, delta_bytes=100_000)
    coordinator.tick()
    _wait_uploads(coordinator)
    clock.t += 1.0
    coordinator.tick()
    spark.run_batch(1, {"0": 11}, barrier=1, delta_bytes=10)
    spark.run_batch(2, {"0": 12}, barrier=2, delta_bytes=10)
    coordinator.tick()
    _wait_uploads(coordinator)
    first, second = store.get(1), store.get(2)
    assert second.first_batch_id == 1
    assert second.full_bytes > 200_000 and second.incremental_bytes < 1_000
    assert {f.path for f in second.files if not f.uploaded} >= {"state/0/0/1.delta", "state/0/1/1.delta"}
    assert first.state_bases == second.state_bases == {"state/0/0": 0, "state/0/1": 0}


def test_min_pause_and_single_outstanding_barrier(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, spark, _store = _coordinator(tmp_path, clock=clock, interval=1.0, min_pause=5.0)
    control = ControlChannel(tmp_path / "control")
    clock.t += 1.0
    coordinator.tick()
    assert control.requested_barrier() == 1
    clock.t += 3.0
    coordinator.tick()
    assert control.requested_barrier() == 1  # barrier 1 not yet seen: no second request
    spark.run_batch(0, {"0": 1}, barrier=1)
    coordinator.tick()
    _wait_uploads(coordinator)
    clock.t += 2.0
    coordinator.tick()
    assert control.requested_barrier() == 1  # min pause since completion not over
    clock.t += 3.1
    coordinator.tick()
    assert control.requested_barrier() == 2


def test_checkpoint_expires_when_the_barrier_never_arrives(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, _spark, store = _coordinator(tmp_path, clock=clock, timeout=5.0, tolerable_failed_checkpoints=3)
    clock.t += 1.0
    coordinator.tick()
    clock.t += 6.0
    events = coordinator.tick()
    assert [(e.checkpoint_id, e.failure.reason) for e in events if e.failure] == [(1, FailureReason.EXPIRED)]
    assert store.checkpoint_ids() == []
    assert [f.checkpoint_id for f in store.failures()] == [1]


def test_failed_uploads_are_never_completed_and_stop_the_job(tmp_path: Path) -> None:
    clock = Clock()
    failing = FailingObjectStore(LocalObjectStore(tmp_path / "store"))
    coordinator, spark, store = _coordinator(tmp_path, objects=failing, clock=clock, tolerable_failed_checkpoints=1)
    batch = 0
    with pytest.raises(TolerableFailuresExceededError) as info:
        for _ in range(5):
            clock.t += 1.0
            coordinator.tick()
            spark.run_batch(batch, {"0": batch}, barrier=coordinator._next_id - 1)
            batch += 1
            coordinator.tick()
            _wait_uploads(coordinator)
    assert info.value.failures == 2 and info.value.tolerable == 1
    assert "UPLOAD_FAILED" in str(info.value) and "tolerable_failed_checkpoints" in str(info.value)
    assert store.checkpoint_ids() == []
    assert {f.reason for f in store.failures()} == {FailureReason.UPLOAD_FAILED}


def _complete_one_checkpoint(coordinator: CheckpointCoordinator, spark: FakeSparkCheckpoint, clock: Clock) -> None:
    """Trigger checkpoint 1, run its barrier batch, and complete it on the last tick (which
    queues the sink commit and returns: the end of a run loop)."""
    clock.t += 1.0
    coordinator.tick()
    spark.run_batch(0, {"0": 10}, barrier=1)
    coordinator.tick()
    for pending in list(coordinator.pending.values()):
        assert pending.upload is not None
        pending.upload.exception(timeout=10)
    assert [e.checkpoint_id for e in coordinator.tick() if e.completed] == [1]


def test_a_failed_commit_of_the_last_checkpoint_is_raised_when_the_coordinator_drains(tmp_path: Path) -> None:
    """No tick runs after the one that queued the last commit: drain reports its failure,
    naming the pipeline, the sink, the epoch and the fix, after the rest of the shutdown."""
    clock = Clock()
    sink = FailingCommitter(RecordingSink(), fail_from=1)
    coordinator, spark, _store = _coordinator(tmp_path, clock=clock, sinks=[sink])
    _complete_one_checkpoint(coordinator, spark, clock)
    with pytest.raises(SinkCommitFailedError) as raised:
        coordinator.drain(timeout=10)
    error = raised.value
    assert (error.sink, error.checkpoint_id, error.action) == ("rec", 1, "commit") and sink.failed == [1]
    message = str(error)
    assert message.startswith("pipeline p: sink 'rec': the commit of epoch 1 (checkpoint 1, completed) failed")
    assert "barrierflow reconcile" in message and "injected failure committing checkpoint 1" in message
    assert ControlChannel(tmp_path / "control").requested_barrier() == 0  # the shutdown finished first


def test_a_sink_failure_is_reported_once(tmp_path: Path) -> None:
    """A failed commit that a tick (or flush) already raised is not raised again by drain."""
    clock = Clock()
    coordinator, spark, _store = _coordinator(tmp_path, clock=clock,
                                              sinks=[FailingCommitter(RecordingSink(), fail_from=1)])
    _complete_one_checkpoint(coordinator, spark, clock)
    with pytest.raises(SinkCommitFailedError):
        coordinator.flush_sinks()
    coordinator.drain(timeout=10)


def test_restart_resumes_ids_after_the_offset_log_and_store(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, spark, store = _coordinator(tmp_path, clock=clock)
    clock.t += 1.0
    coordinator.tick()
    spark.run_batch(0, {"0": 1}, barrier=1)
    coordinator.tick()
    _wait_uploads(coordinator)
    # A barrier planned before a crash (offsets/1 carries barrier 2, no commit yet):
    (spark.root / "offsets" / "1").write_text('v1\n{}\n{"partitions": {"0": 2}, "barrier": 2}')
    again, _, _ = _coordinator(tmp_path, clock=clock)
    assert again._next_id == 3
    spark.run_batch(1, {"0": 2}, barrier=2)  # Spark replays batch 1 with the same barrier
    again.tick()
    _wait_uploads(again)
    assert store.checkpoint_ids() == [1, 2]


def test_base_moves_to_a_newer_snapshot_once_the_deltas_outweigh_it() -> None:
    from barrierflow.checkpointing.snapshot import _choose_base

    sizes = {"3.snapshot": 100, **{f"{v}.delta": 30 for v in range(1, 7)}}
    deltas, snapshots = set(range(1, 7)), {3}
    # Deltas 1-3 (90 bytes) weigh less than snapshot 3 (100): keep base 0, upload only delta 6.
    assert _choose_base(deltas, snapshots, 6, previous=0, size=sizes.__getitem__) == 0
    sizes["3.snapshot"] = 80  # now they outweigh it: restore reads 80 + 90 instead of 180
    assert _choose_base(deltas, snapshots, 6, previous=0, size=sizes.__getitem__) == 3
    assert _choose_base(deltas, snapshots, 6, previous=0) == 0  # without sizes: keep the base
    assert _choose_base(deltas - {2}, snapshots, 6, previous=None, size=sizes.__getitem__) == 3


def _stage_coordinator(tmp_path: Path, records: dict[int, dict], sink: RecordingSink, tolerable: int = 0,
                       now: Callable[[], datetime] = lambda: datetime.now(UTC)):
    """A stage of a multi-stage pipeline: alignment records come from ``records``, sink
    commits wait for the pipeline coordinator."""
    spark = FakeSparkCheckpoint(tmp_path / "spark")
    store = CheckpointStore(LocalObjectStore(tmp_path / "store"), "p-z")
    coordinator = CheckpointCoordinator(
        pipeline="p-z", store=store,
        options=CheckpointSpec(storage="file://unused", interval=1.0, timeout=10.0,
                               tolerable_failed_checkpoints=tolerable),
        spark_checkpoint_dir=spark.root, snapshot_dir=tmp_path / "staging",
        control=ControlChannel(tmp_path / "control"), source_names=["channels"], sinks=[sink], monotonic=Clock(),
        alignment=records.get, commit_on_completion=False, now=now)
    coordinator.trigger_limit = 0
    coordinator.start()
    return coordinator, spark, store


ALIGNED_RECORD = {"format_version": 1, "checkpoint_id": 1, "attempt": 0, "mode": "unaligned", "alignment_ms": 0.0,
                  "snapshot_offsets": {"t:0": 5, "t:1": 3}, "barrier_offsets": {"t:0": 4, "t:1": 9},
                  "channel_state": [{"partition": "t:1", "start": 3, "end": 9, "records": 6, "back_edge": False}],
                  "channel_state_records": 6}


def test_stage_snapshot_waits_for_its_alignment_record_and_defers_sink_commits(tmp_path: Path) -> None:
    records: dict[int, dict] = {}
    sink = RecordingSink()
    coordinator, spark, store = _stage_coordinator(tmp_path, records, sink)
    coordinator.tick()
    assert ControlChannel(tmp_path / "control").requested_barrier() == 0  # a channel stage never triggers
    spark.run_batch(0, {"t:0": 5, "t:1": 3}, barrier=1)  # the barrier arrived in-band
    coordinator.tick()
    _wait_uploads(coordinator)
    assert coordinator.completed == [] and store.checkpoint_ids() == []  # channel state not known yet
    records[1] = ALIGNED_RECORD
    _wait_uploads(coordinator)
    manifest = store.get(1)
    assert manifest.alignment is not None and manifest.alignment.mode == "unaligned"
    assert manifest.alignment.channel_state_records == 6 and manifest.alignment.channel_state[0].end == 9
    assert sink.completed == []  # the stage's manifest alone commits nothing
    assert coordinator.commit_sinks(1) and not coordinator.commit_sinks(2)
    coordinator.flush_sinks()
    assert sink.completed == [(1, 0)]


def test_a_stage_times_a_checkpoint_it_did_not_trigger_from_the_trigger_its_barrier_carried(tmp_path: Path) -> None:
    start = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    clock = [start]
    records = {1: {**ALIGNED_RECORD, "mode": "aligned", "channel_state": [], "channel_state_records": 0},
               2: {**ALIGNED_RECORD, "checkpoint_id": 2, "mode": "aligned", "channel_state": [],
                   "channel_state_records": 0}}
    coordinator, spark, store = _stage_coordinator(tmp_path, records, RecordingSink(), now=lambda: clock[0])
    ms = lambda t: round(t.timestamp() * 1000)  # noqa: E731
    # Checkpoint 1 was triggered (upstream) 1 s after this run started; the stage sees it at 3 s.
    spark.run_batch(0, {"t:0": 5}, barrier=1, extra={"barrier_triggered_ms": ms(start + timedelta(seconds=1))})
    clock[0] = start + timedelta(seconds=3)
    coordinator.tick()
    _wait_uploads(coordinator)
    first = store.get(1)
    assert first.trigger_time == start + timedelta(seconds=1) and first.total_ms == 2000.0
    # A trigger time from before this run (a barrier batch replayed after a restart) is not this
    # run's trigger: the stage times it from when it saw the barrier.
    spark.run_batch(1, {"t:0": 9}, barrier=2, extra={"barrier_triggered_ms": ms(start - timedelta(minutes=5))})
    clock[0] = start + timedelta(seconds=4)
    coordinator.tick()
    _wait_uploads(coordinator)
    assert store.get(2).trigger_time == start + timedelta(seconds=4)
    # A value that is no time (a foreign or damaged offset) is not recorded: timed from now.
    records[3] = {**records[2], "checkpoint_id": 3}
    spark.run_batch(2, {"t:0": 12}, barrier=3, extra={"barrier_triggered_ms": "soon"})
    clock[0] = start + timedelta(seconds=6)
    coordinator.tick()
    _wait_uploads(coordinator)
    assert store.get(3).trigger_time == start + timedelta(seconds=6)


def test_aborted_alignment_fails_the_stage_snapshot_at_once(tmp_path: Path) -> None:
    records: dict[int, dict] = {1: {"format_version": 1, "checkpoint_id": 1, "aborted": True, "reason": "SUBSUMED",
                                    "message": "a newer barrier arrived first: barrier 2 on t:0"}}
    coordinator, spark, store = _stage_coordinator(tmp_path, records, RecordingSink(), tolerable=1)
    spark.run_batch(0, {"t:0": 5}, barrier=1)
    coordinator.tick()
    events = _wait_uploads(coordinator)
    assert [(e.checkpoint_id, e.completed) for e in events] == [(1, False)]
    assert events[0].failure is not None and events[0].failure.reason is FailureReason.SNAPSHOT_FAILED
    assert "barrier 2 on t:0" in events[0].failure.message and store.checkpoint_ids() == []


def test_only_the_newest_completed_manifests_stay_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running driver must not keep every manifest (each lists all its files)."""
    import barrierflow.checkpointing.coordinator as coordinator_module

    monkeypatch.setattr(coordinator_module, "KEEP_COMPLETED", 3)
    clock = Clock()
    coordinator, spark, store = _coordinator(tmp_path, clock=clock)
    for n in range(1, 6):
        clock.t += 1.0
        coordinator.tick()
        spark.run_batch(n - 1, {"0": 10 * n}, barrier=n)
        coordinator.tick()
        _wait_uploads(coordinator)
    assert coordinator.completed_count == 5
    assert [m.checkpoint_id for m in coordinator.completed] == [3, 4, 5]
    assert coordinator.last_completed is not None and coordinator.last_completed.checkpoint_id == 5
    assert store.checkpoint_ids() == [1, 2, 3, 4, 5]
