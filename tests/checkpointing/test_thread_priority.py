"""``checkpoint.async_nice``: the asynchronous phase (hashing, upload, sink pre-commit) runs at
a lower CPU priority than processing; the caller's thread keeps its own."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.checkpointing.thread_priority import background_executor
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage.local import LocalObjectStore
from pydantic import ValidationError

from tests.checkpointing.fake_spark import FakeSparkCheckpoint

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class PriorityRecordingStore(LocalObjectStore):
    """Records the nice value of every thread that uploads a file."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.upload_nice: set[int] = set()

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        self.upload_nice.add(_nice())
        super().put_file(key, local_path, sha256)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("nice", [0, 7])
def test_checkpoint_uploads_run_at_the_configured_priority_and_processing_keeps_its_own(
        tmp_path: Path, nice: int) -> None:
    base = _nice()
    objects = PriorityRecordingStore(tmp_path / "store")
    spark = FakeSparkCheckpoint(tmp_path / "spark")
    clock = Clock()
    coordinator = CheckpointCoordinator(
        pipeline="p", options=CheckpointSpec(storage="file://unused", interval=1.0, timeout=10.0, async_nice=nice),
        store=CheckpointStore(objects, "p"), spark_checkpoint_dir=spark.root, snapshot_dir=tmp_path / "staging",
        control=ControlChannel(tmp_path / "control"), source_names=["events"], monotonic=clock)
    coordinator.start()
    clock.t += 1.0
    coordinator.tick()
    spark.run_batch(0, {"0": 10}, barrier=1)
    coordinator.tick()
    for pending in list(coordinator.pending.values()):
        assert pending.upload is not None
        pending.upload.exception(timeout=10)
    events = coordinator.tick()
    assert [e.checkpoint_id for e in events if e.completed] == [1]
    assert objects.upload_nice == {min(19, base + nice)}
    assert _nice() == base  # the thread that drives processing is untouched


def test_background_executor_lowers_only_its_own_threads() -> None:
    base = _nice()
    with background_executor(2, "t", 5) as pool:
        assert set(pool.map(lambda _: _nice(), range(4))) == {min(19, base + 5)}
    assert _nice() == base


def test_async_nice_out_of_range_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="async_nice"):
        CheckpointSpec(storage="file://unused", async_nice=20)
