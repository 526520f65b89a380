"""How a figure measured over rounds is stated: median (lowest-highest), and a trial under 3 rounds."""

from __future__ import annotations

import math

from bench.spread import MIN_ROUNDS, median, median_spread, per_round, ratios, rounds_note


def test_median_spread_leaves_out_rounds_that_measured_nothing() -> None:
    assert median_spread([3.0, 1.0, 100.0]) == "3 (1-100)"
    assert median_spread([2.5, math.nan, 0.5], ".2f") == "1.50 (0.50-2.50)"
    assert median_spread([7.0]) == "7" and median_spread([math.nan]) == "-" and median_spread([]) == "-"
    assert median([1.0, math.nan, 4.0, 9.0]) == 4.0 and math.isnan(median([]))


def test_ratios_per_round_mark_a_round_without_a_denominator() -> None:
    assert per_round(ratios([1.0, 2.0, 3.0], [2.0, 0.0, math.nan]), sep=" / ") == "0.50 / - / -"


def test_fewer_than_three_rounds_are_a_trial() -> None:
    assert MIN_ROUNDS == 3 and rounds_note(3) == "" and rounds_note(7) == ""
    assert rounds_note(2) == " (fewer than 3 rounds: a trial, not a figure to cite)"


def test_the_event_time_tables_give_the_median_of_the_rounds_with_their_spread() -> None:
    from barrierflow.spec import load_spec, project_home

    from bench.event_time import ModeSample, render

    spec = load_spec(project_home() / "include" / "pipelines" / "bench.yaml")
    samples = {"fixed": ModeSample(throughput=[900.0, 1000.0, 100.0], total_ms=[5.0], barrier_batch_ms=[2.0],
                                   checkpoints=[1, 2, 3], late_rows=[0, 1, 0])}
    sizing = render("batch-sizing", samples, spec, 20, 3)
    assert "| fixed | 900 (100-1,000) | 6 | 5 | 5 | 2 |" in sizing and "trial" not in sizing
    assert "| fixed | 900 (100-1,000) | 6 | 1 |" in render("alignment", samples, spec, 20, 3)
    one_round = render("alignment", samples, spec, 20, 1)
    assert "1 round(s) (fewer than 3 rounds: a trial, not a figure to cite)" in one_round
