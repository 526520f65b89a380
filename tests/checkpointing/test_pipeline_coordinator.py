"""The pipeline coordinator on a real local checkpoint store, with stages reduced to their
stores and a recording double for the final stage's sink notifications (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.errors import GlobalManifestExistsError
from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.manifest import FailureReason, FailureRecord, Manifest
from barrierflow.checkpointing.pipeline_coordinator import PipelineCoordinator, StageHandle
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class RecordingStage:
    """Stands in for a final stage's CheckpointCoordinator: records what it is told."""

    committed: list[int] = field(default_factory=list)
    aborted: list[int] = field(default_factory=list)

    def commit_sinks(self, checkpoint_id: int) -> bool:
        self.committed.append(checkpoint_id)
        return True

    def abort_sinks(self, checkpoint_id: int) -> None:
        self.aborted.append(checkpoint_id)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def stage_manifest(stage: str, checkpoint_id: int) -> Manifest:
    return Manifest(pipeline=f"p-{stage}", checkpoint_id=checkpoint_id, attempt=0, spark_batch_id=checkpoint_id,
                    first_batch_id=0, state_version=checkpoint_id + 1, barrier_offsets={}, max_event_time={},
                    trigger_time=T0, barrier_time=T0, completion_time=T0, barrier_batch_ms=1.0, sync_ms=2.0,
                    async_ms=3.0, total_ms=4.0, full_bytes=0, incremental_bytes=0, files=[])


def setup(tmp_path: Path, clock: Clock, **options: float) -> tuple[PipelineCoordinator, dict[str, StageHandle],
                                                                   RecordingStage]:
    root = f"file://{tmp_path / 'chk'}"
    final = RecordingStage()
    stages = {}
    for name in ("a", "b"):
        control = ControlChannel(tmp_path / name / "control")
        control.reset()
        stages[name] = StageHandle(name, CheckpointStore(open_store(f"{root}/stages/{name}"), f"p-{name}"), control,
                                   coordinator=final if name == "b" else None,  # type: ignore[arg-type]
                                   is_source=name == "a", is_final=name == "b")
    spec = CheckpointSpec(storage=root, **{"interval": 1.0, "timeout": 10.0, **options})
    coordinator = PipelineCoordinator("p", spec, open_store(root), list(stages.values()), monotonic=clock)
    return coordinator, stages, final


def test_global_checkpoint_waits_for_every_stage_snapshot(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, stages, final = setup(tmp_path, clock)
    coordinator.start()
    clock.t = 1.0
    coordinator.tick()
    assert stages["a"].control.requested_barrier() == 1  # barrier requested at the source stage only
    assert stages["b"].control.requested_barrier() == 0
    stages["a"].store.write_manifest(stage_manifest("a", 1))
    clock.t = 1.5
    assert coordinator.tick() == []  # stage b's snapshot is missing: not complete, nothing committed
    assert not (tmp_path / "chk" / global_key(1, "_metadata")).exists() and final.committed == []
    stages["b"].store.write_manifest(stage_manifest("b", 1))
    (event,) = coordinator.tick()
    assert event.completed and event.manifest is not None
    assert event.manifest.stages["b"].manifest == "stages/b/chk-1/_metadata.json"
    stored = GlobalManifest.model_validate_json((tmp_path / "chk" / global_key(1, "_metadata")).read_bytes())
    assert stored.checkpoint_id == 1 and set(stored.stages) == {"a", "b"}
    assert final.committed == [1]  # the final stage's sinks commit only after the global manifest


def test_failed_stage_snapshot_or_timeout_fails_the_global_checkpoint(tmp_path: Path) -> None:
    clock = Clock()
    coordinator, stages, final = setup(tmp_path, clock)
    coordinator.start()
    clock.t = 1.0
    coordinator.tick()
    stages["a"].store.write_manifest(stage_manifest("a", 1))
    stages["b"].store.record_failure(FailureRecord(pipeline="p-b", checkpoint_id=1, reason=FailureReason.UPLOAD_FAILED,
                                                   message="disk full", trigger_time=T0, failure_time=T0))
    (event,) = coordinator.tick()
    assert not event.completed and event.failure is not None and event.failure.reason == "STAGE_FAILED"
    assert "stage(s) b failed" in event.failure.message and final.aborted == [1]
    clock.t = 2.5
    coordinator.tick()  # triggers 2
    clock.t = 13.0
    (event,) = coordinator.tick()
    assert event.failure is not None and event.failure.reason == "EXPIRED"
    assert "stages without a snapshot: a, b" in event.failure.message
    assert (tmp_path / "chk" / global_key(2, "_failed")).exists() and final.aborted == [1, 2]


def test_a_restarted_coordinator_continues_where_it_stopped(tmp_path: Path) -> None:
    clock = Clock()
    first, stages, _ = setup(tmp_path, clock)
    first.start()
    clock.t = 1.0
    first.tick()  # triggers 1, then "crashes"
    stages["a"].store.write_manifest(stage_manifest("a", 1))
    stages["b"].store.write_manifest(stage_manifest("b", 1))
    second, _, final = setup(tmp_path, clock)
    second.start()
    assert list(second.pending) == [1]
    (event,) = second.tick()
    assert event.completed and event.checkpoint_id == 1 and final.committed == [1]
    clock.t = 3.0
    second.tick()
    assert list(second.pending) == [2]  # ids continue after the stored ones


def test_a_global_manifest_already_there_is_never_overwritten(tmp_path: Path) -> None:
    """A second writer (another pipeline coordinator on the same store) completed checkpoint 1
    first: this coordinator refuses, leaves its manifest as it is and commits nothing."""
    clock = Clock()
    coordinator, stages, final = setup(tmp_path, clock)
    coordinator.start()
    clock.t = 1.0
    coordinator.tick()  # triggers 1
    stages["a"].store.write_manifest(stage_manifest("a", 1))
    stages["b"].store.write_manifest(stage_manifest("b", 1))
    other, _, _ = setup(tmp_path, clock)
    other.start()
    (theirs,) = other.tick()  # the other coordinator takes 1 up and completes it first
    assert theirs.manifest is not None
    with pytest.raises(GlobalManifestExistsError, match="global checkpoint 1 of pipeline p already has a manifest"):
        coordinator.tick()
    stored = GlobalCheckpointStore(open_store(f"file://{tmp_path / 'chk'}"), "p").get(1)
    assert stored == theirs.manifest  # not rewritten
    assert final.committed == [] and coordinator.completed == []  # this one commits nothing for 1


def test_min_pause_spaces_a_completion_and_the_next_trigger(tmp_path: Path) -> None:
    """``checkpoint.min_pause`` holds in a pipeline of several stages: after global checkpoint 1
    completes at t=1.2, the next one is triggered only at t >= 1.2 + 3, though the 1 s interval
    passed long before; after global checkpoint 2 fails at t=5, the next one waits as long (the
    pause counts from a checkpoint's end, completed or failed, as in a single-stage pipeline)."""
    clock = Clock()
    coordinator, stages, _ = setup(tmp_path, clock, min_pause=3.0)
    coordinator.start()
    clock.t = 1.0
    coordinator.tick()  # triggers 1
    for name in ("a", "b"):
        stages[name].store.write_manifest(stage_manifest(name, 1))
    clock.t = 1.2
    (event,) = coordinator.tick()
    assert event.completed
    for t in (2.5, 3.5, 4.1):
        clock.t = t
        coordinator.tick()
        assert coordinator.pending == {}, f"triggered at t={t}, within min_pause of the completion"
    clock.t = 4.3
    coordinator.tick()
    assert list(coordinator.pending) == [2] and stages["a"].control.requested_barrier() == 2
    stages["b"].store.record_failure(FailureRecord(pipeline="p-b", checkpoint_id=2, reason=FailureReason.UPLOAD_FAILED,
                                                   message="disk full", trigger_time=T0, failure_time=T0))
    clock.t = 5.0
    (event,) = coordinator.tick()
    assert not event.completed and coordinator.pending == {}
    for t in (6.5, 7.9):
        clock.t = t
        coordinator.tick()
        assert coordinator.pending == {}, f"triggered at t={t}, within min_pause of the failure"
    clock.t = 8.1
    coordinator.tick()
    assert list(coordinator.pending) == [3]
