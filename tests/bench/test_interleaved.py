"""The interleaved ABS-overhead method (bench.interleaved) on a real query: segments
run from commit to commit without gaps, every checkpoint falls inside a segment of a checkpointing
mode, and the synchronous baseline holds the planner only in its own segments. (The benchmark's
figures are printed, never asserted.)"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import BarrierflowError, CheckpointError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage.local import LocalObjectStore

from bench.interleaved import Segment, balanced_orders, fold_round, interleave, segment_plan
from bench.modes import BASELINE, BASELINE_AGAIN, Mode, Sample, mode_spec
from tests.checkpointing.fake_spark import FakeSparkCheckpoint
from tests.pipeline_specs import make_spec

ABS = Mode("ABS 0.3 s", 0.3)
SYNC = Mode("sync snapshot 0.3 s", 0.3, synchronous=True)
MODES = (BASELINE, ABS, SYNC, BASELINE_AGAIN)


class HoldRecordingStore(LocalObjectStore):
    """Records, per checkpoint, whether the planner was held when its manifest was written (the
    synchronous baseline writes it before releasing the hold; ABS never holds)."""

    def __init__(self, root: Path, control: ControlChannel) -> None:
        super().__init__(root)
        self.control = control
        self.held: dict[int, bool] = {}

    def put_if_absent(self, key: str, data: bytes) -> bool:
        found = re.fullmatch(r"chk-(\d+)/_metadata\.json", key)
        if found:
            self.held[int(found.group(1))] = self.control.is_held()
        return super().put_if_absent(key, data)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_balanced_orders_put_every_mode_in_every_position_and_after_every_other_equally_often(n: int) -> None:
    orders = balanced_orders(n)
    assert len(orders) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    for position in range(n):
        assert Counter(o[position] for o in orders) == {i: len(orders) // n for i in range(n)}
    follows = Counter((a, b) for o in orders for a, b in itertools.pairwise(o))
    assert set(follows) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(follows.values()) == {1 if n % 2 == 0 else 2}


def test_segment_plan_walks_the_balanced_orders_across_cycles_and_rounds() -> None:
    names = [m.name for m in MODES]  # 4 modes: orders 0 1 3 2, 1 2 0 3, 2 3 1 0, 3 0 2 1
    plan = segment_plan(MODES, 2)
    assert [(c, m.name) for c, m in plan] == ([(0, names[i]) for i in (0, 1, 3, 2)]
                                              + [(1, names[i]) for i in (1, 2, 0, 3)])
    second_round = segment_plan(MODES, 2, start=2)
    assert [m.name for _, m in second_round] == [names[i] for i in (2, 3, 1, 0, 3, 0, 2, 1)]
    with pytest.raises(BarrierflowError, match="at least one cycle"):
        segment_plan(MODES, 0)


@pytest.mark.spark
def test_interleaved_segments_cover_every_batch_once_and_charge_each_checkpoint_to_its_own_mode(
        spark, tmp_path: Path) -> None:
    base = make_spec(tmp_path, source={"max_records_per_batch": 500, "keys": 200})
    spec = mode_spec(base, BASELINE, tmp_path / "bench")
    objects = HoldRecordingStore(tmp_path / "store", ControlChannel(tmp_path / "bench" / "work" / "control"))
    job = StreamingJob(spec, spark=spark, checkpoint_objects=objects)
    assert job.layout.control == tmp_path / "bench" / "work" / "control"
    plan = segment_plan(MODES, 2)

    segments = interleave(job, plan, segment_seconds=1.5)

    assert [(s.cycle, s.mode) for s in segments] == [(c, m.name) for c, m in plan]
    # From commit to commit, no gaps, no overlaps: every batch after the first is in one segment.
    for before, after in itertools.pairwise(segments):
        assert after.first_batch == before.last_batch + 1
    assert all(s.last_batch >= s.first_batch and s.records > 0 and s.seconds >= 1.5 for s in segments)
    # Checkpoints: only in checkpointing segments, each with at least one, each barrier inside it,
    # each completed there (the segment waited for its last one), none failed.
    checkpointing = {ABS.name, SYNC.name}
    for s in segments:
        if s.mode in checkpointing:
            assert s.checkpoint_ids, s
            assert all(s.first_batch <= b <= s.last_batch for b in s.checkpoint_batches), s
        else:
            assert s.checkpoint_ids == [], s
        assert s.failed == 0
    stored = CheckpointStore(objects, spec.name).checkpoint_ids()
    assert sorted(i for s in segments for i in s.checkpoint_ids) == stored
    # The synchronous baseline held the planner for its own checkpoints only.
    for s in segments:
        for checkpoint_id in s.checkpoint_ids:
            assert objects.held[checkpoint_id] is (s.mode == SYNC.name), (s.mode, checkpoint_id)
    assert not ControlChannel(job.layout.control).is_held()


def test_a_round_folds_into_per_mode_throughput_over_its_segments() -> None:
    def seg(mode: Mode, cycle: int, records: int, seconds: float, cpu: float, ids: list[int]) -> Segment:
        return Segment(mode.name, cycle, 1, 2, records, seconds, cpu, 0.5, 0.1, checkpoint_ids=ids,
                       sync_ms=[1.0] * len(ids), async_ms=[9.0] * len(ids), incremental_bytes=[100] * len(ids))

    segments = [seg(BASELINE, 0, 1000, 10.0, 20.0, []), seg(ABS, 0, 900, 10.0, 20.0, [1, 2]),
                seg(ABS, 1, 1200, 20.0, 30.0, [3]), seg(BASELINE, 1, 1100, 10.0, 20.0, [])]
    samples = {m.name: Sample() for m in (BASELINE, ABS)}
    lines = fold_round(segments, (BASELINE, ABS), samples)
    assert samples[ABS.name].throughput == [2100 / 30.0]  # records over seconds, not a mean of segment rates
    assert samples[ABS.name].checkpoints == [3]
    assert samples[ABS.name].records_per_cpu_second == [2100 / 50.0]
    assert samples[ABS.name].async_ms == [9.0, 9.0, 9.0]
    assert samples[BASELINE.name].throughput == [2100 / 20.0]
    assert "per-cycle ratio to no checkpoints 0.55-0.90" in lines[1]  # 900/1000, 60/110


def test_retune_is_refused_while_a_checkpoint_is_pending(tmp_path: Path) -> None:
    fake = FakeSparkCheckpoint(tmp_path / "spark")
    clock = [100.0]
    coordinator = CheckpointCoordinator(
        pipeline="p", options=CheckpointSpec(storage="file://unused", interval=1.0, timeout=10.0),
        store=CheckpointStore(LocalObjectStore(tmp_path / "store"), "p"), spark_checkpoint_dir=fake.root,
        snapshot_dir=tmp_path / "staging", control=ControlChannel(tmp_path / "control"), source_names=["events"],
        monotonic=lambda: clock[0])
    coordinator.start()
    with pytest.raises(CheckpointError, match="must be positive"):
        coordinator.retune(interval=0.0, synchronous_upload=False)
    coordinator.retune(interval=5.0, synchronous_upload=True)
    assert (coordinator.options.interval, coordinator.options.synchronous_upload) == (5.0, True)
    clock[0] += 4.0
    coordinator.tick()
    assert not coordinator.pending  # the new interval (5 s) is the one triggering goes by
    clock[0] += 1.0
    coordinator.tick()
    assert coordinator.pending
    with pytest.raises(CheckpointError, match="while checkpoints \\[1\\] are pending"):
        coordinator.retune(interval=1.0, synchronous_upload=False)
