"""Properties of the pure batch planner over random requests (Hypothesis, bounded): a batch
never moves a partition backwards, never crosses a barrier, respects the size cap, keeps
paused partitions where they are, ends a replayed batch exactly at the recorded ends, and
injects a barrier exactly when a newer checkpoint was requested."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from barrierflow.barriers import planner
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch
from hypothesis import given, settings
from hypothesis import strategies as st

partitions = st.sampled_from(["0", "1", "2", "3"])
offsets = st.dictionaries(partitions, st.integers(0, 10_000), max_size=4)


@st.composite
def requests(draw: st.DrawFn) -> PlanRequest:
    start = SourceOffset(draw(offsets), draw(st.integers(0, 50)), {}, draw(st.integers(0, 3)))
    return PlanRequest(
        start=start,
        available=draw(offsets),
        max_records_per_partition=draw(st.none() | st.integers(1, 500)),
        requested_barrier=draw(st.integers(0, 60)),
        hold=draw(st.booleans()) and draw(st.booleans()),  # hold in about a quarter of the cases
        paused_partitions=frozenset(draw(st.sets(partitions, max_size=2))),
        replay_end=draw(st.none() | offsets),
    )


@pytest.fixture(params=["python", "arrays"], scope="module")
def arithmetic(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both ways the planner advances partitions: plain Python, and int64 arrays (used from
    VECTOR_MIN_PARTITIONS on; lowered to 0 here so that four partitions take that path)."""
    saved = planner.VECTOR_MIN_PARTITIONS
    planner.VECTOR_MIN_PARTITIONS = 0 if request.param == "arrays" else saved
    yield request.param
    planner.VECTOR_MIN_PARTITIONS = saved


@settings(max_examples=400, deadline=None)
@given(request=requests())
def test_the_planner_keeps_its_rules_for_any_request(arithmetic: str, request: PlanRequest) -> None:
    plan = plan_batch(request)
    start, end = request.start.partitions, plan.end.partitions
    if request.hold:
        assert plan.end == request.start and not plan.injects_barrier
        return
    for partition, begin in start.items():
        assert end.get(partition, 0) >= begin, "a partition moved backwards"
    if request.replay_end is not None:
        for partition, recorded in request.replay_end.items():
            assert end[partition] == max(start.get(partition, 0), recorded), "a replayed batch left its recorded end"
    else:
        for partition, stop in end.items():
            begin = start.get(partition, 0)
            if partition in request.paused_partitions:
                assert stop == begin, "a paused partition advanced"
            if request.max_records_per_partition is not None:
                assert stop - begin <= request.max_records_per_partition, "the batch size cap was exceeded"
            assert stop <= max(begin, request.available.get(partition, begin)), "planned past the available data"
            if partition not in request.paused_partitions:  # and it goes exactly as far as it may
                reach = request.available.get(partition, begin)
                if request.max_records_per_partition is not None:
                    reach = min(reach, begin + request.max_records_per_partition)
                assert stop == max(begin, reach), "a partition stopped short of what it may read"
    # One barrier per batch at most, the barrier id never decreases, and it is the requested one.
    assert plan.injects_barrier == (request.requested_barrier > request.start.barrier)
    assert plan.end.barrier == max(request.start.barrier, request.requested_barrier)
    assert plan.end.attempt == request.start.attempt
