"""The batch planner: capping, barrier injection, hold, paused partitions."""

from __future__ import annotations

import random

import pytest
from barrierflow.barriers import planner
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


def _reference_end(start: dict[str, int], available: dict[str, int], cap: int | None) -> dict[str, int]:
    """Rule 2 of the planner written out plainly (new partitions start at 0)."""
    end = {}
    for partition in sorted(start.keys() | available.keys()) if available.keys() - start.keys() else start:
        begin = start.get(partition, 0)
        reach = available.get(partition, begin)
        end[partition] = max(begin, reach if cap is None else min(reach, begin + cap))
    return end


@pytest.mark.parametrize("case", ["same order", "spark's order", "some unreported", "a new partition", "huge offsets"])
@pytest.mark.parametrize("cap", [None, 0, 7, 10**6])
def test_many_partitions_plan_like_the_rule(case: str, cap: int | None) -> None:
    """From VECTOR_MIN_PARTITIONS on the arithmetic runs on arrays; it must still be rule 2
    exactly, whatever the order of the partitions and whatever is (not) reported."""
    rng = random.Random(f"{case}-{cap}")
    count = planner.VECTOR_MIN_PARTITIONS + 88
    begins = {str(p): rng.randrange(0, 1_000) for p in range(count)}
    available = {p: b + rng.randrange(-20, 40) for p, b in begins.items()}
    if case == "spark's order":  # the start as Spark hands it back: through JSON, keys sorted as strings
        begins = SourceOffset.from_json(SourceOffset(begins).to_json()).partitions
    elif case == "some unreported":
        available = {p: a for p, a in available.items() if rng.random() < 0.9}
    elif case == "a new partition":
        available[str(count)] = 5
    elif case == "huge offsets":
        begins["3"], available["3"] = 2**63 + 1, 2**63 + 9
    plan = plan_batch(PlanRequest(SourceOffset(begins, barrier=1), available, max_records_per_partition=cap))
    assert plan.end.partitions == _reference_end(begins, available, cap)
    assert list(plan.end.partitions) == list(_reference_end(begins, available, cap))  # start's order
    assert all(type(offset) is int for offset in plan.end.partitions.values())


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


def test_barriers_only_admits_nothing_but_injects_a_requested_barrier() -> None:
    """A stop's savepoint, a canary waiting for its verification: the barrier comes in a batch
    that reads nothing; without a request nothing changes (Spark plans no batch)."""
    start = _start(p0=1, p1=2)
    plan = plan_batch(PlanRequest(start, {"0": 100, "1": 100}, requested_barrier=7, barrier_triggered_ms=5,
                                  barriers_only=True))
    assert plan.injects_barrier and plan.end.barrier == 7 and plan.end.partitions == start.partitions
    assert plan.end.barrier_triggered_ms == 5
    idle = plan_batch(PlanRequest(plan.end, {"0": 100, "1": 100}, requested_barrier=7, barriers_only=True))
    assert idle.end == plan.end and not idle.injects_barrier


def test_paused_partitions_stay() -> None:
    plan = plan_batch(PlanRequest(_start(p0=0, p1=0), {"0": 10, "1": 10}, paused_partitions=frozenset({"1"})))
    assert plan.end.partitions == {"0": 10, "1": 0}


def test_offset_json_round_trip() -> None:
    off = SourceOffset({"t:0": 5, "t:1": 7}, barrier=2)
    assert SourceOffset.from_json(off.to_json()) == off
