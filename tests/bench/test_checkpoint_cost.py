"""bench --scenario checkpoint-cost: its batch kinds, ratios, table and options (the benchmark
prints numbers, never asserts them)."""

from __future__ import annotations

import json
import math

import pytest

from bench.checkpoint_cost import PARTS, WITH, WITHOUT, RunFigures, classify, part_medians, render, round_ratios


def _figures(mode: str, number: int, rate: float, durations: dict[int, float], barriers: list[int]) -> RunFigures:
    parts = {b: {p: (ms if p == "triggerExecution" else 0.0) for p in PARTS} for b, ms in durations.items()}
    return RunFigures(mode, number, rate, 1000, len(parts), len(barriers), 0.5, 2.0, 0.1, parts,
                      classify(sorted(parts), barriers))


def test_batches_are_told_apart_by_the_checkpoints_barrier_batches() -> None:
    assert classify([3, 4, 5, 6, 7], [4, 7]) == {3: "other", 4: "barrier", 5: "after barrier", 6: "other",
                                                 7: "barrier"}
    assert classify([1, 2], []) == {1: "other", 2: "other"}


def test_ratios_pair_the_two_modes_of_each_round_and_the_table_lists_every_round() -> None:
    runs = [_figures(WITHOUT, 1, 100.0, {1: 10.0, 2: 12.0}, []), _figures(WITH, 1, 97.0, {1: 30.0, 2: 11.0}, [1]),
            _figures(WITH, 2, 90.0, {1: 50.0}, [1]), _figures(WITHOUT, 2, 100.0, {1: 14.0}, []),
            _figures(WITH, 3, math.nan, {}, []), _figures(WITHOUT, 3, 100.0, {}, [])]
    assert round_ratios(runs) == pytest.approx([0.97, 0.90])  # round 3 had no rate with checkpoints
    medians = part_medians(runs)
    assert medians[f"{WITH}: barrier"]["batches"] == 2
    assert medians[f"{WITH}: barrier"]["triggerExecution"] == 40.0
    assert medians[f"{WITHOUT}: other"]["triggerExecution"] == 12.0
    table = render("reference", {"command": "c", "commit": "abc", "started": "2026-12-02 20:00", "cores": 2,
                                 "load_start": 1.0, "load_end": 1.5, "what": "w"}, runs)
    assert "commit abc" in table and "load average (1 min) 1.00 at the start" in table
    assert "per round (back to back): 0.970, 0.900; median 0.935, spread 0.900-0.970" in table


def test_job_applies_to_the_checkpoint_cost_scenario_only(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import main

    assert main(["--scenario", "restore", "--job", "kafka"]) == 2
    assert "--job applies to --scenario checkpoint-cost only" in capsys.readouterr().err
    assert main(["--scenario", "checkpoint-cost", "--job", "kafka", "--records", "2"]) == 2
    assert "--records needs at least 4 records" in capsys.readouterr().err


def test_a_kafka_run_ends_at_the_batch_that_read_the_topics_last_record(tmp_path: object) -> None:
    """Both modes end the same way: at the first committed batch whose offsets (the connector's
    line merged with the barrier-only source's) reach the topic's record count."""
    from pathlib import Path
    from types import SimpleNamespace

    from bench.checkpoint_cost import ReadAll

    root = Path(str(tmp_path))
    (root / "offsets").mkdir()
    for batch, ends in ((0, 100), (1, 250)):
        (root / "offsets" / str(batch)).write_text(
            "v1\n{}\n" + json.dumps({"t": {"0": ends, "1": ends}})
            + '\n{"partitions": {}, "barrier": 0, "connector": "kafka"}')
    job = SimpleNamespace(runner=SimpleNamespace(latest_batch=None), layout=SimpleNamespace(spark_checkpoint=root))
    until = ReadAll(500)
    assert until(job) is False  # nothing committed yet
    job.runner.latest_batch = 0
    assert until(job) is False  # 200 of 500
    job.runner.latest_batch = 1
    assert until(job) is True


def test_the_aa_control_is_a_third_mode_of_each_round_with_its_own_ratios() -> None:
    from bench.checkpoint_cost import AGAIN, alternate

    seen: list[tuple[str, int]] = []

    def run(mode: str, number: int) -> RunFigures:
        seen.append((mode, number))
        return _figures(mode, number, {WITHOUT: 100.0, WITH: 95.0, AGAIN: 102.0}[mode], {1: 10.0}, [])

    runs = alternate(run, 2, aa=True)
    assert seen == [(WITHOUT, 0), (WITH, 0), (WITHOUT, 1), (WITH, 1), (AGAIN, 1), (AGAIN, 2), (WITH, 2),
                    (WITHOUT, 2)]
    assert round_ratios(runs, AGAIN) == pytest.approx([1.02, 1.02])
    table = render("reference", {"command": "c", "commit": "abc", "started": "2026-12-03 08:00", "cores": 2,
                                 "load_start": 0.1, "load_end": 0.2, "what": "w"}, runs)
    assert "A/A: no checkpoints again / without, per round: 1.020, 1.020; median 1.020" in table
    assert f"| {AGAIN} | 102, 102 |" in table
