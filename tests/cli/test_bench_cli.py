"""`barrierflow bench` argument checks (the benchmarks themselves print numbers, never assert them)."""

from __future__ import annotations

import pytest


def test_bench_rejects_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.main import main

    assert main(["bench", "--scenario", "restore", "--keys", "0"]) == 2
    assert "--keys >= 1" in capsys.readouterr().err


def test_scale_scenario_measures_every_size_with_verified_synthetic_checkpoints(
        capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    """Small sizes in the suite (the large ones are in docs/benchmarks.md): every size gets a
    row, its checkpoints pass structural verification (the benchmark raises otherwise), and
    the manifest grows with the partition count."""
    from barrierflow.bench.scale import run_scale_benchmark
    from barrierflow.cli.main import main

    results = run_scale_benchmark((10, 300), checkpoints=2, plan_calls=5)
    assert [r.partitions for r in results] == [10, 300]
    assert results[1].manifest_bytes > results[0].manifest_bytes
    assert all(r.plan_ms > 0 and r.checkpoint_ms > 0 and r.verify_ms > 0 for r in results)
    table = capsys.readouterr().out
    assert "| 10 |" in table and "| 300 |" in table
    assert main(["bench", "--scenario", "scale", "--partitions", "0"]) == 2
    assert "partition counts >= 1" in capsys.readouterr().err
