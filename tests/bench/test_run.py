"""`python -m bench` argument checks (the benchmarks themselves print numbers, never assert them)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_bench_rejects_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import main

    assert main(["--scenario", "restore", "--keys", "0"]) == 2
    assert "--keys >= 1" in capsys.readouterr().err
    assert main(["--state-keys", "0"]) == 2
    assert "--state-keys >= 1" in capsys.readouterr().err
    assert main(["--store", "bucket/prefix"]) == 2
    assert "--store needs a storage URI such as s3://bucket/prefix" in capsys.readouterr().err
    assert main(["--seconds", "30", "--interleave", "45"]) == 2
    assert "--interleave needs segments of more than 0 s and at most --seconds (30); got 45" in capsys.readouterr().err
    assert main(["--scenario", "restore", "--interleave", "10"]) == 2
    assert "--interleave applies to --scenario abs-overhead only" in capsys.readouterr().err
    assert main(["--scenario", "restore", "--text", "realistic"]) == 2
    assert "--text applies to --scenario kafka only; drop it" in capsys.readouterr().err
    assert main(["--scenario", "kafka", "--events", "1000", "--queries", "q5"]) == 2
    assert "--events, --queries apply to --scenario nexmark only; drop them" in capsys.readouterr().err
    assert main(["--scenario", "nexmark", "--queries", "q3", "--engines", "flink"]) == 2
    assert "--queries takes q0, q1, q2, q5, q7, q8" in capsys.readouterr().err
    assert main(["--scenario", "freshness", "--rounds", "0"]) == 2
    assert "--rounds >= 1" in capsys.readouterr().err


def test_the_stages_scenario_measures_past_the_warm_up_unless_told_otherwise() -> None:
    from bench.run import DEFAULT_SECONDS, STAGES_SECONDS, build_parser, seconds_per_mode

    assert build_parser().parse_args(["--scenario", "stages"]).seconds is None
    assert seconds_per_mode(None, "stages") == STAGES_SECONDS == 120.0
    assert seconds_per_mode(None, "abs-overhead") == seconds_per_mode(None, "stages", "flink-sql") == DEFAULT_SECONDS
    assert seconds_per_mode(45.0, "stages") == 45.0
    assert seconds_per_mode(None, "nexmark") == 15.0


def test_scale_scenario_measures_every_size_with_verified_synthetic_checkpoints(
        capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    """Small sizes in the suite (the large ones are in bench/results/): every size gets a
    row, its checkpoints pass structural verification (the benchmark raises otherwise), and
    the manifest grows with the partition count."""
    from bench.run import main
    from bench.scale import run_scale_benchmark

    folder = Path(str(tmp_path))
    results = run_scale_benchmark((10, 300), checkpoints=2, plan_calls=5, results=folder)
    assert [r.partitions for r in results] == [10, 300]
    assert sorted(p.suffix for p in folder.iterdir()) == [".json", ".md"]  # the run's record, not in bench/results/
    assert results[1].manifest_bytes > results[0].manifest_bytes
    assert all(r.plan_ms > 0 and r.plan_cpu_ms >= 0 and r.checkpoint_ms > 0 and r.verify_ms > 0 for r in results)
    table = capsys.readouterr().out
    assert "| 10 |" in table and "| 300 |" in table
    assert main(["--scenario", "scale", "--partitions", "0"]) == 2
    assert "partition counts >= 1" in capsys.readouterr().err


def test_stages_scenario_spec_is_valid_and_slows_one_partition(tmp_path: object) -> None:
    """The stages benchmark's pipeline passes the spec's checks in each mode, and stage z reads
    c1's partition 1 at a tenth of the others' rate (the numbers themselves are benchmarked,
    not tested)."""
    import json
    from pathlib import Path

    from barrierflow.runtime.pipeline import StagedPipelineJob
    from barrierflow.spec import parse_staged_spec

    from bench.stages import MODES, stages_spec

    for _label, mode, timeout in MODES:
        spec = parse_staged_spec(stages_spec(Path(str(tmp_path)), "127.0.0.1:9", mode=mode,
                                             alignment_timeout=timeout, interval=1.0, rate=400.0))
        assert spec.checkpoint.mode.value == mode and spec.checkpoint.alignment_timeout == timeout
        job = StagedPipelineJob(spec)
        z = next(j for j in job.stages if j.name == "z")
        rates = json.loads(z.kind.run_options(z.spec, job.stage_run(z))["alignment"])["rate_factors"]
        assert rates == {f"{spec.channels[0].topic_for(spec.name)}:1": 0.1}


def test_compare_flink_sql_without_flink_says_to_run_make_flink(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from bench.run import main

    monkeypatch.setenv("BARRIERFLOW_FLINK_PYTHON", f"{tmp_path}/no-such-python")
    assert main(["--compare", "flink-sql"]) == 2
    err = capsys.readouterr().err
    assert "no-such-python does not exist: run `make flink`" in err and "BARRIERFLOW_FLINK_PYTHON" in err
    assert main(["--compare", "flink-sql", "--scenario", "stages"]) == 2
    assert "--compare flink-sql runs its own job; drop --scenario stages" in capsys.readouterr().err


def test_compare_table_names_both_flink_configurations_and_compares_with_the_tuned_one() -> None:
    """The comparison's table: both Flink configurations' settings, per system the median over
    the rounds with the lowest and highest round (one disturbed round moves no figure), each
    system's 1 s / none ratio per round, and barrierflow / Flink as the ratio of the medians and
    per round, tuned first (the figure to cite), untuned beside it. Three rounds make a result;
    fewer are marked a trial."""
    from bench.flink_compare import Runs, render

    runs = Runs(barrierflow_none=[2.0e6, 2.2e6, 1.0e6], barrierflow_1s=[1.9e6, 2.0e6, 0.5e6],
                flink_none=[2.0e6, 2.5e6, 2.5e6], flink_1s=[1.6e6, 2.0e6, 2.0e6],
                flink_tuned_none=[2.5e6, 2.75e6, 2.0e6], flink_tuned_1s=[1.9e6, 2.5e6, 2.0e6],
                flink_version="2.3.0",
                flink_config={"untuned": {}, "tuned": {"table.exec.mini-batch.enabled": "true",
                                                       "table.optimizer.agg-phase-strategy": "TWO_PHASE"}})
    table = render(runs, "local[2]", 30, 3)
    assert ("Flink untuned: Flink's defaults. Flink tuned: `table.exec.mini-batch.enabled=true`, "
            "`table.optimizer.agg-phase-strategy=TWO_PHASE`.") in table
    assert ("| barrierflow (ABS) | 2,000,000 (1,000,000-2,200,000)"
            " | 1,900,000 (500,000-2,000,000) | 0.95 / 0.91 / 0.50 |") in table
    assert ("| Flink SQL, tuned | 2,500,000 (2,000,000-2,750,000)"
            " | 2,000,000 (1,900,000-2,500,000) | 0.76 / 0.91 / 1.00 |") in table
    assert ("| Flink SQL, untuned | 2,500,000 (2,000,000-2,500,000)"
            " | 2,000,000 (1,600,000-2,000,000) | 0.80 / 0.80 / 0.80 |") in table
    assert ("barrierflow / Flink tuned, ratio of the medians: no checkpoints 0.80 (per round 0.80 / 0.80 / 0.50); "
            "1 s checkpoints 0.95 (per round 1.00 / 0.80 / 0.25)") in table
    assert ("barrierflow / Flink untuned, ratio of the medians: no checkpoints 0.80 (per round 1.00 / 0.88 / 0.40); "
            "1 s checkpoints 0.95 (per round 1.19 / 1.00 / 0.25)") in table
    assert "trial" not in table
    two = Runs(**{name: values[:2] for name, values in vars(runs).items() if isinstance(values, list)})
    assert "2 round(s), alternating order (fewer than 3 rounds: a trial, not a figure to cite)" in render(
        two, "local[2]", 30, 2)


def test_abs_overhead_table_compares_each_mode_with_both_baseline_runs_and_shows_the_aa_noise() -> None:
    """Each mode's per-round ratio is against the mean of that round's two no-checkpoint runs; the
    A/A line gives the second baseline run over the first."""
    from barrierflow.spec import load_spec, project_home

    from bench.abs_overhead import render
    from bench.modes import BASELINE, BASELINE_AGAIN, Sample, modes_for

    modes = modes_for([20.0, 5.0])
    assert [m.name for m in modes] == ["no checkpoints", "ABS 1 s @ 20 MB/s", "sync snapshot 1 s @ 20 MB/s",
                                       "no checkpoints, again", "ABS 1 s @ 5 MB/s", "sync snapshot 1 s @ 5 MB/s"]
    samples = {m.name: Sample(throughput=[400.0, 500.0, 400.0]) for m in modes}
    samples[BASELINE.name].throughput = [380.0, 500.0, 400.0]
    samples[BASELINE_AGAIN.name].throughput = [420.0, 450.0, 400.0]
    samples["ABS 1 s @ 20 MB/s"].throughput = [390.0, 380.0, 100.0]
    spec = load_spec(project_home() / "include" / "pipelines" / "bench.yaml")
    table = render(samples, spec, 60, 3, "s3://bench/abs", modes)
    # 390/400, 380/475, 100/400: the median, not the mean, of the rounds; the disturbed round shows in the spread
    assert "| ABS 1 s @ 20 MB/s | 380 (100-390) | 0.800 | 0.97, 0.80, 0.25 |" in table
    assert "A/A (the same job twice per round, second run / first): 1.11, 0.90, 1.00" in table
    assert "trial" not in table and "(fewer than 3 rounds: a trial, not a figure to cite)" in render(
        {name: Sample(throughput=s.throughput[:2]) for name, s in samples.items()}, spec, 60, 2, None, modes)


def test_each_benchmark_run_writes_under_its_own_store_prefix() -> None:
    """A run must not find an earlier run's checkpoints (its jobs would restore from them)."""
    from datetime import UTC, datetime, timedelta, timezone

    from bench.abs_overhead import run_prefix

    first = run_prefix("s3://bench/abs/", datetime(2026, 11, 24, 21, 5, 7, tzinfo=UTC))
    assert first == "s3://bench/abs/20261124T210507Z"
    later = datetime(2026, 11, 24, 22, 5, 8, tzinfo=timezone(timedelta(hours=1)))  # 21:05:08 UTC
    assert run_prefix("s3://bench/abs", later) == "s3://bench/abs/20261124T210508Z" != first


def test_kafka_scenario_pipelines_of_two_and_three_stages_are_valid(tmp_path: object) -> None:
    """The Kafka benchmark's multi-stage pipelines pass the spec's checks and open as a chain
    ingest -> (mid ->) totals whose first stage reads Kafka and last keeps keyed totals; a
    shape it does not have is refused before anything starts."""
    from pathlib import Path

    from barrierflow.runtime.pipeline import StagedPipelineJob
    from barrierflow.spec import parse_staged_spec

    from bench.kafka_source import main as kafka_main
    from bench.kafka_source import staged_spec

    for stages, names in ((2, ["ingest", "totals"]), (3, ["ingest", "mid", "totals"])):
        spec = parse_staged_spec(staged_spec(Path(str(tmp_path)), "127.0.0.1:9", "events", stages=stages,
                                             batch=1000, partitions=4))
        job = StagedPipelineJob(spec)
        assert [j.name for j in job.stages] == names
        assert [j.stage.source_type for j in job.stages] == ["kafka"] + ["channel"] * (stages - 1)
        assert list(job.graph.source_stages) == ["ingest"] and list(job.graph.final_stages) == ["totals"]
    with pytest.raises(SystemExit):
        kafka_main(["--stages", "4"])


def test_stages_options_are_checked_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """A rate below one record per second, or --processes for another scenario, is refused
    with exit 2 and a message naming the option and the fix (nothing is started)."""
    from bench.run import main

    assert main(["--scenario", "stages", "--rate", "0.5"]) == 2
    assert "needs --rate >= 1 record/s per partition (got 0.5)" in capsys.readouterr().err
    assert main(["--scenario", "scale", "--processes"]) == 2
    assert "--processes applies to --scenario stages only; drop it" in capsys.readouterr().err
