"""The freshness benchmark's reader figures: which checkpoints they count (the warm-up's are
left out, the first completed one without a warm-up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from barrierflow.errors import UserInputError

from bench.freshness import _burst_figures, _epoch_figures
from bench.run import build_parser

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_epoch_figures_count_only_the_measured_epochs() -> None:
    seen = [(at(2.0), at(0.5), 1), (at(2.2), at(0.9), 1), (at(3.1), at(1.6), 2), (at(4.0), at(2.5), 3),
            (at(4.1), at(2.9), None)]
    assert _epoch_figures(seen, {2, 3}) == [1.5, 1.5]
    assert _epoch_figures(seen, {1}) == [1.7]


def test_burst_figures_leave_out_the_bursts_before_the_cutoff() -> None:
    seen = [(at(2.0), at(0.5)), (at(2.01), at(0.9)), (at(3.0), at(1.8)), (at(3.02), at(2.0)), (at(4.0), at(3.1))]
    assert _burst_figures(seen, None) == [(at(3.02) - at(1.8)).total_seconds(),
                                          (at(4.0) - at(3.1)).total_seconds()]
    assert _burst_figures(seen, at(3.5)) == [(at(4.0) - at(3.1)).total_seconds()]
    assert _burst_figures(seen, at(0.0)) == [(at(2.01) - at(0.5)).total_seconds(), (at(3.02) - at(1.8)).total_seconds(),
                                             (at(4.0) - at(3.1)).total_seconds()]


def test_a_negative_or_non_numeric_warm_up_is_refused_naming_the_option() -> None:
    for bad, why in (("-5", "give 0 or more seconds"), ("soon", "is not a number of seconds")):
        with pytest.raises(UserInputError, match=f"argument --warm-up: '{bad}'.*{why}"):
            build_parser().parse_args(["--scenario", "freshness", "--warm-up", bad])
    assert build_parser().parse_args(["--scenario", "freshness", "--warm-up", "0"]).warm_up == 0.0
