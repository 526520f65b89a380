"""bench.rates: records/s after the first batch, counted one way for one and several stages."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from bench.rates import BatchEnd, StageBatchClock, job_rate, rate_after_first_batch


@dataclass
class _Stage:
    stage: str
    batch_id: int | None


@dataclass
class _Progress:
    stages: tuple[_Stage, ...]


@dataclass
class _Result:
    records: int
    steady_records: int
    steady_seconds: float


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_batch_records_and_time_are_left_out() -> None:
    # 1,000 records in the first batch (ended at 10 s), 5,000 by the last batch (ended at 14 s).
    assert rate_after_first_batch(BatchEnd(10.0, 1_000), BatchEnd(14.0, 5_000)) == 1_000.0


def test_a_run_of_one_batch_has_no_rate_after_it() -> None:
    assert math.isnan(rate_after_first_batch(BatchEnd(10.0, 1_000), BatchEnd(10.0, 1_000)))


def test_swapped_ends_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="pass the first completed batch first"):
        rate_after_first_batch(BatchEnd(14.0, 5_000), BatchEnd(10.0, 1_000))


def test_a_single_stage_result_is_counted_by_the_definition() -> None:
    # records 5,000, of which 4,000 after the first batch, over 4 s from its end to the last batch's.
    assert job_rate(_Result(records=5_000, steady_records=4_000, steady_seconds=4.0)) == 1_000.0
    assert math.isnan(job_rate(_Result(records=1_000, steady_records=0, steady_seconds=0.0)))


def test_several_stages_count_the_same_way_as_one_stage() -> None:
    clock = _Clock()
    batches = StageBatchClock("ingest", "totals", clock=clock)
    reports = [  # (seen at, ingest batch, totals batch)
        (9.0, None, None),
        (10.0, 0, None),  # ingest's first batch ends
        (11.0, 1, 0),
        (12.0, 3, 1),
        (14.0, 4, 3),  # totals' last batch ends
        (15.0, 4, 3),  # nothing new: the end stays at 14 s
    ]
    for at, ingest, totals in reports:
        clock.now = at
        batches(_Progress((_Stage("ingest", ingest), _Stage("mid", 7), _Stage("totals", totals))))
    assert batches.first_batch == (0, 10.0)
    assert batches.last_batch_at == 14.0
    staged = batches.rate(first_batch_records=1_000, records=5_000)
    single = job_rate(_Result(records=5_000, steady_records=4_000, steady_seconds=14.0 - 10.0))
    assert staged == single == 1_000.0


def test_a_run_whose_last_stage_never_committed_has_no_rate() -> None:
    clock = _Clock()
    batches = StageBatchClock("ingest", "totals", clock=clock)
    clock.now = 10.0
    batches(_Progress((_Stage("ingest", 0), _Stage("totals", None))))
    assert math.isnan(batches.rate(first_batch_records=1_000, records=5_000))


def test_flink_runs_are_counted_after_their_start_as_barrierflow_runs_after_their_first_batch() -> None:
    from bench.flink_compare import flink_rate

    # The short run (50,000 rows in 1.5 s) takes the first batch's place: the 1 s start common
    # to both runs drops out, so 950,000 more rows in 9.5 more seconds is 100,000 records/s
    # (rows / seconds of the measured run alone would say 90,476).
    result = {"rows": 1_000_000, "seconds": 11.0, "first_rows": 50_000, "first_seconds": 1.5}
    assert flink_rate(result) == pytest.approx(100_000.0)
    assert math.isnan(flink_rate({**result, "first_seconds": 11.0}))
