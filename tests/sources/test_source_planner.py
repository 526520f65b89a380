"""SourcePlanner (no Spark): batch sizing from measured batches, alignment caps from the
generator's exact event times, the per-batch history, and unchanged plans without settings."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.flow_control.watermark_history import WatermarkHistory
from barrierflow.sources.generator import GeneratorModel, _from_us
from barrierflow.sources.planning import PlanningOptions, SourcePlanner
from barrierflow.spec.models import GeneratorSourceSpec


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _planner(tmp_path: Path, options: PlanningOptions) -> tuple[SourcePlanner, Clock]:
    control = ControlChannel(tmp_path)
    control.reset()
    clock = Clock()
    return SourcePlanner(options, control, clock), clock


def test_without_settings_the_plan_is_the_plain_capped_advance(tmp_path: Path) -> None:
    planner, _ = _planner(tmp_path, PlanningOptions())
    end = planner.plan(SourceOffset({"0": 5, "1": 0}), {"0": 100, "1": 7}, 50, lambda o: {})
    assert end.partitions == {"0": 55, "1": 7}
    assert WatermarkHistory(tmp_path).records() == []


def test_batches_are_sized_to_the_target_duration_from_measured_throughput(tmp_path: Path) -> None:
    planner, clock = _planner(tmp_path, PlanningOptions(target_batch_duration=1.0))
    available = {"0": 10_000_000, "1": 10_000_000}
    end = planner.plan(SourceOffset({"0": 0, "1": 0}), available, 2_500_000, lambda o: {})
    assert end.partitions == {"0": 1000, "1": 1000}  # cold start: the minimum
    clock.now = 0.5  # one size seen: probe upwards (twice the records)
    end = planner.plan(end, available, 2_500_000, lambda o: {})
    assert end.partitions == {"0": 3000, "1": 3000}
    clock.now = 0.5 + 1.0  # 4000 records in 1.0 s after 2000 in 0.5 s: 0 s fixed, 0.25 ms/record
    end = planner.plan(end, available, 2_500_000, lambda o: {})
    assert end.partitions == {"0": 5000, "1": 5000}  # 1 s = 4000 records, 2000 per partition


def test_generator_alignment_caps_and_pauses_and_records_history(tmp_path: Path) -> None:
    spec = GeneratorSourceSpec(type="generator", partitions=2, rows_per_second=0, event_time_step_ms=100,
                               event_time_skew_ms=[0, -60_000])
    model = GeneratorModel(spec)
    planner, _ = _planner(tmp_path, PlanningOptions(watermark_delay=5.0, max_drift=2.0))

    def at(offsets):
        return {p: _from_us(model.event_time_us(int(p), o)) for p, o in offsets.items()}

    def offset_at(p, t):
        return model.offset_at(int(p), t)

    end = planner.plan(SourceOffset({"0": 0, "1": 0}), {"0": 1000, "1": 1000}, 1000, at, offset_at)
    # 0 is paused (60 s ahead); 1 catches up in one batch, to at most max_drift past 0's place
    assert end.partitions == {"0": 0, "1": 621}
    end = planner.plan(end, {"0": 1000, "1": 1621}, 1000, at, offset_at)
    # now 1 is 2.1 s ahead of 0's place: paused; 0 advances to at most max_drift past 1
    assert end.partitions == {"0": 42, "1": 621}
    # (max_drift past 1's next record, i.e. max_drift plus one record past 1's newest)
    assert model.max_event_time(0, 42) == model.max_event_time(1, 621) + timedelta(seconds=2.1)
    records = WatermarkHistory(tmp_path).records()
    assert [r.paused for r in records] == [["0"], ["1"]]
    assert records[1].pauses == {"0": 1, "1": 1} and records[1].end == end.partitions


def test_a_partition_held_back_with_records_left_is_never_idle(tmp_path: Path) -> None:
    """A source may let a partition advance less than its log holds (the channel source's slow
    consumer waits for credit): ``available`` then ends where the partition starts, but
    ``offered`` (the log's end) is further on. Idleness looks at ``offered``: without it the
    partition would count as idle after ``idle_timeout`` and stop holding back alignment."""
    planner, clock = _planner(tmp_path, PlanningOptions(watermark_delay=5.0, idle_timeout=1.0))
    begin = SourceOffset({"0": 10, "1": 10})
    for now in (0.0, 2.0, 4.0):  # partition 1 reaches nothing in any batch: it waits for credit
        clock.now = now
        begin = planner.plan(begin, {"0": begin.partitions["0"] + 5, "1": 10}, 5, lambda o: dict.fromkeys(o),
                             offered={"0": 100, "1": 100})
    assert [r.idle for r in WatermarkHistory(tmp_path).records()] == [[], [], []]
    clock.now = 6.0  # the same with its log drained: idle once the timeout passed
    planner.plan(begin, {"0": begin.partitions["0"] + 5, "1": 10}, 5, lambda o: dict.fromkeys(o),
                 offered={"0": 100, "1": 10})
    assert WatermarkHistory(tmp_path).records()[-1].idle == ["1"]
