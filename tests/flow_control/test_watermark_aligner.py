"""Watermark alignment and idleness (pure): which partitions the next batch pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch
from barrierflow.flow_control.watermark_alignment import AlignmentSettings, WatermarkAligner

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def wm(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_partition_ahead_by_more_than_max_drift_is_paused_and_resumes_when_the_others_catch_up() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=2.0))
    start = {"0": 10, "1": 10}
    available = {"0": 100, "1": 100}
    d = aligner.decide(0.0, start, available, {"0": wm(0), "1": wm(2)})
    assert d.paused == frozenset()  # exactly max_drift ahead: not paused
    d = aligner.decide(1.0, start, available, {"0": wm(0), "1": wm(2.5)})
    assert d.paused == {"1"} and d.partitions["1"].pauses == 1
    d = aligner.decide(3.0, start, available, {"0": wm(1), "1": wm(2.5)})
    assert d.paused == frozenset()
    assert d.partitions["1"].pauses == 1 and d.partitions["1"].paused_seconds == 2.0
    assert d.partitions["0"].pauses == 0 and d.partitions["0"].paused_seconds == 0.0


def test_a_pause_in_progress_counts_its_seconds_so_far() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=1.0))
    aligner.decide(5.0, {"0": 1, "1": 1}, {"0": 9, "1": 9}, {"0": wm(0), "1": wm(60)})
    d = aligner.decide(7.5, {"0": 2, "1": 1}, {"0": 9, "1": 9}, {"0": wm(0.5), "1": wm(60)})
    assert d.paused == {"1"} and d.partitions["1"].pauses == 1 and d.partitions["1"].paused_seconds == 2.5


def test_an_active_partition_without_a_watermark_holds_back_all_others() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=5.0))
    d = aligner.decide(0.0, {"0": 0, "1": 0}, {"0": 0, "1": 0}, {"0": None, "1": None})
    assert d.paused == frozenset()  # nothing known yet: nobody is ahead
    d = aligner.decide(1.0, {"0": 0, "1": 50}, {"0": 0, "1": 100}, {"0": None, "1": wm(0)})
    assert d.paused == {"1"}


def test_an_idle_partition_stops_holding_back_alignment_and_resumes_with_its_next_record() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=1.0, idle_timeout=3.0))
    # partition 1 read everything it had (offset 5) and gets nothing new
    start = {"0": 100, "1": 5}
    d = aligner.decide(0.0, start, {"0": 200, "1": 5}, {"0": wm(30), "1": wm(0)})
    assert d.paused == {"0"} and d.idle == frozenset()
    d = aligner.decide(2.9, start, {"0": 200, "1": 5}, {"0": wm(30), "1": wm(0)})
    assert d.paused == {"0"} and d.idle == frozenset()
    d = aligner.decide(3.0, start, {"0": 200, "1": 5}, {"0": wm(30), "1": wm(0)})
    assert d.idle == {"1"} and d.paused == frozenset() and d.partitions["1"].idle
    assert d.partitions["0"].paused_seconds == 3.0
    d = aligner.decide(10.0, {"0": 150, "1": 5}, {"0": 300, "1": 5}, {"0": wm(40), "1": wm(0)})
    assert d.idle == {"1"} and d.paused == frozenset()  # the others keep advancing
    # a new record arrives on partition 1: active again at once, and far behind -> 0 is paused
    d = aligner.decide(11.0, {"0": 200, "1": 5}, {"0": 300, "1": 6}, {"0": wm(50), "1": wm(0)})
    assert d.idle == frozenset() and d.paused == {"0"} and d.partitions["0"].pauses == 2


def test_a_partition_with_unread_records_is_never_idle() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=None, idle_timeout=1.0))
    aligner.decide(0.0, {"0": 0}, {"0": 50}, {"0": None})
    assert aligner.decide(60.0, {"0": 0}, {"0": 50}, {"0": None}).idle == frozenset()
    assert aligner.decide(61.0, {"0": 50}, {"0": 50}, {"0": wm(0)}).idle == {"0"}


def test_without_max_drift_nothing_is_paused() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=None))
    assert aligner.decide(0.0, {"0": 0, "1": 0}, {"0": 9, "1": 9}, {"0": wm(0), "1": wm(999)}).paused == frozenset()


def test_the_paused_set_is_recomputed_only_every_update_interval() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=1.0, update_interval=2.0))
    start, available = {"0": 0, "1": 0}, {"0": 9, "1": 9}
    assert aligner.decide(0.0, start, available, {"0": wm(0), "1": wm(0)}).paused == frozenset()
    assert aligner.decide(1.0, start, available, {"0": wm(0), "1": wm(10)}).paused == frozenset()
    assert aligner.decide(2.0, start, available, {"0": wm(0), "1": wm(10)}).paused == {"1"}
    assert aligner.decide(3.0, start, available, {"0": wm(20), "1": wm(10)}).paused == {"1"}
    assert aligner.decide(4.0, start, available, {"0": wm(20), "1": wm(10)}).paused == {"0"}


def test_alignment_never_blocks_a_barrier() -> None:
    """Every partition paused: the barrier batch is still planned; paused partitions do not move."""
    aligner = WatermarkAligner(AlignmentSettings(max_drift=1.0))
    start = SourceOffset({"0": 10, "1": 10}, barrier=3)
    d = aligner.decide(0.0, start.partitions, {"0": 10, "1": 90}, {"0": None, "1": wm(5)})
    assert d.paused == {"1"}
    plan = plan_batch(PlanRequest(start=start, available={"0": 10, "1": 90}, requested_barrier=4,
                                  paused_partitions=d.paused))
    assert plan.injects_barrier and plan.end.barrier == 4 and plan.end.partitions == {"0": 10, "1": 10}


def test_the_ceiling_is_the_smallest_reach_plus_max_drift_and_caps_the_planner() -> None:
    aligner = WatermarkAligner(AlignmentSettings(max_drift=2.0, idle_timeout=1.0))
    start, available = {"0": 0, "1": 0, "2": 5}, {"0": 99, "1": 99, "2": 5}
    d = aligner.decide(0.0, start, available, {"0": wm(0), "1": wm(1), "2": wm(-600)},
                       reach={"0": wm(100), "1": wm(101), "2": wm(-600)})
    assert d.ceiling == wm(-598) and d.paused == {"0", "1"}
    d = aligner.decide(1.0, start, available, {"0": wm(0), "1": wm(1), "2": wm(-600)},
                       reach={"0": wm(100), "1": wm(101), "2": wm(-600)})
    assert d.idle == {"2"} and d.paused == frozenset() and d.ceiling == wm(102)  # the idle one caps nobody
    # a paused partition stays put: its start watermark, not its reach, counts
    d = WatermarkAligner(AlignmentSettings(max_drift=2.0)).decide(
        0.0, {"0": 0, "1": 0}, {"0": 99, "1": 99}, {"0": wm(10), "1": wm(0)}, reach={"0": wm(110), "1": wm(50)})
    assert d.paused == {"0"} and d.ceiling == wm(12)
    plan = plan_batch(PlanRequest(start=SourceOffset({"0": 0, "1": 0}), available={"0": 99, "1": 99},
                                  partition_caps={"0": 40, "1": 20}))
    assert plan.end.partitions == {"0": 40, "1": 20}
    assert WatermarkAligner(AlignmentSettings(max_drift=2.0)).decide(
        0.0, {"0": 0, "1": 0}, {"0": 9, "1": 9}, {"0": wm(0), "1": wm(0)}).ceiling is None  # no reach given
