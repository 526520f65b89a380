"""`barrierflow bench` argument checks (the benchmarks themselves print numbers, never assert them)."""

from __future__ import annotations

import pytest


def test_bench_rejects_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.main import main

    assert main(["bench", "--scenario", "restore", "--keys", "0"]) == 2
    assert "--keys >= 1" in capsys.readouterr().err
