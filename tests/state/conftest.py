"""Fixtures of the state tests: the command line, run in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from barrierflow.cli.main import main

SHUFFLE = "spark.sql.shuffle.partitions"


@pytest.fixture
def cli(spark: Any, capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """``cli(*args)`` -> (exit code, stdout, stderr) of ``barrierflow ARGS``; the session's shuffle
    partitions (which a run of another spec changes) put back afterwards."""
    before = spark.conf.get(SHUFFLE)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    spark.conf.set(SHUFFLE, before)
