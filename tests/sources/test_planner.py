"""The batch planner: capping, barrier injection, hold, paused partitions."""

from __future__ import annotations

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch


def _start(**parts: int) -> SourceOffset:
    return SourceOffset({k.removeprefix("p"): v for k, v in parts.items()}, barrier=3)


def test_advances_to_available_capped_per_partition() -> None:
    plan = plan_batch(PlanRequest(_start(p0=10, p1=0), {"0": 50, "1": 5}, max_records_per_partition=20))
    assert plan.end.partitions == {"0": 30, "1": 5}
    assert plan.end.barrier == 3 and not plan.injects_barrier


def test_never_moves_backwards_and_picks_up_new_partitions() -> None:
    plan = plan_batch(PlanRequest(_start(p0=10), {"0": 4, "1": 7}))
    assert plan.end.partitions == {"0": 10, "1": 7}


def test_the_plan_does_not_depend_on_the_order_or_completeness_of_available() -> None:
    start = _start(p0=10, p1=20, p2=30)
    in_order = plan_batch(PlanRequest(start, {"0": 15, "1": 40, "2": 31}, max_records_per_partition=10))
    shuffled = plan_batch(PlanRequest(start, {"2": 31, "0": 15, "1": 40}, max_records_per_partition=10))
    assert in_order.end.partitions == shuffled.end.partitions == {"0": 15, "1": 30, "2": 31}
    assert list(shuffled.end.partitions) == ["0", "1", "2"]  # the start's order
    unreported = plan_batch(PlanRequest(start, {"1": 40}))  # a partition not reported stays where it is
    assert unreported.end.partitions == {"0": 10, "1": 40, "2": 30}
    swapped = plan_batch(PlanRequest(start, {"1": 40, "3": 5}))  # as many partitions, one of them new
    assert swapped.end.partitions == {"0": 10, "1": 40, "2": 30, "3": 5}


def test_injects_a_newer_barrier_once() -> None:
    first = plan_batch(PlanRequest(_start(p0=0), {"0": 5}, requested_barrier=4))
    assert first.injects_barrier and first.end.barrier == 4
    again = plan_batch(PlanRequest(first.end, {"0": 9}, requested_barrier=4))
    assert not again.injects_barrier and again.end.barrier == 4  # sticky, not re-injected


def test_older_request_is_ignored() -> None:
    plan = plan_batch(PlanRequest(_start(p0=0), {"0": 5}, requested_barrier=2))
    assert not plan.injects_barrier and plan.end.barrier == 3


def test_barrier_without_new_data_still_changes_the_offset() -> None:
    plan = plan_batch(PlanRequest(_start(p0=5), {"0": 5}, requested_barrier=9))
    assert plan.end.partitions == {"0": 5} and plan.end.to_json() != _start(p0=5).to_json()


def test_hold_admits_nothing_and_injects_nothing() -> None:
    start = _start(p0=1, p1=2)
    plan = plan_batch(PlanRequest(start, {"0": 100, "1": 100}, requested_barrier=7, hold=True))
    assert plan.end == start and not plan.injects_barrier


def test_paused_partitions_stay() -> None:
    plan = plan_batch(PlanRequest(_start(p0=0, p1=0), {"0": 10, "1": 10}, paused_partitions=frozenset({"1"})))
    assert plan.end.partitions == {"0": 10, "1": 0}


def test_offset_json_round_trip() -> None:
    off = SourceOffset({"t:0": 5, "t:1": 7}, barrier=2)
    assert SourceOffset.from_json(off.to_json()) == off
