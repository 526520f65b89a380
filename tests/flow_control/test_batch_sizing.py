"""Adaptive batch sizing (pure): the per-partition cap follows a fitted batch-time model."""

from __future__ import annotations

import itertools

import pytest
from barrierflow.flow_control.batch_sizing import BatchSizer


def simulate(sizer: BatchSizer, fixed: float, per_record: float, partitions: int, batches: int) -> list[int]:
    """Run ``batches`` batches of a system where n records take ``fixed + n * per_record`` s."""
    caps = []
    for _ in range(batches):
        cap = sizer.cap(partitions)
        caps.append(cap)
        n = cap * partitions
        sizer.measured(n, fixed + n * per_record)
    return caps


def test_cold_start_plans_the_minimum() -> None:
    assert BatchSizer(1.0, maximum=1_000_000, minimum=1_000).cap(4) == 1_000


def test_batches_converge_to_the_target_duration() -> None:
    # 0.4 s fixed cost, 1 M records/s: a 1 s batch holds 600 k records = 150 k per partition
    caps = simulate(BatchSizer(1.0, maximum=2_500_000), 0.4, 1e-6, 4, 12)
    assert caps[0] == 1_000 and caps[1] == 2_000  # probing upwards
    assert all(b <= 4 * a for a, b in itertools.pairwise(caps))  # bounded growth
    assert caps[-1] == pytest.approx(150_000, rel=0.02)


def test_a_fixed_cost_above_the_target_does_not_shrink_batches_to_nothing() -> None:
    # 2 s fixed cost (a loaded machine), target 1 s: half the target on top of the fixed cost
    caps = simulate(BatchSizer(1.0, maximum=2_500_000), 2.0, 1e-6, 4, 12)
    assert caps[-1] == pytest.approx(125_000, rel=0.02)


def test_cap_is_bounded_below_and_above() -> None:
    assert simulate(BatchSizer(1.0, maximum=50_000, minimum=2_000), 0.1, 1e-7, 1, 12)[-1] == 50_000
    assert simulate(BatchSizer(1.0, maximum=50_000, minimum=2_000), 0.1, 1e-2, 1, 12)[-1] == 2_000
    assert BatchSizer(1.0, maximum=500, minimum=2_000).cap(1) == 500  # a maximum below the minimum wins


def test_window_and_ignored_measurements() -> None:
    sizer = BatchSizer(1.0, maximum=10_000_000, window=2)
    sizer.measured(0, 0.5)
    sizer.measured(100, 0.0)
    assert sizer.next_records() is None
    sizer.measured(1_000, 1.0)
    sizer.measured(2_000, 1.5)
    sizer.measured(4_000, 2.5)  # window 2: fits (2000, 1.5) and (4000, 2.5): 0.5 s + 0.5 ms/record
    assert sizer.fit() == pytest.approx((0.5, 0.0005))
    assert sizer.next_records() == pytest.approx(2_000)  # the model says 1000; at least half of 4000


def test_target_must_be_positive() -> None:
    with pytest.raises(ValueError, match="target_seconds"):
        BatchSizer(0.0, maximum=10)


def test_a_batch_is_at_least_half_the_previous_one() -> None:
    sizer = BatchSizer(1.0, maximum=10_000_000, minimum=1)
    sizer.measured(100_000, 1.0)
    sizer.measured(200_000, 21.0)  # 0.1 ms per record: 1 s would be about 10 k records
    assert sizer.next_records() == 100_000
