"""The failure-free reference output, computed once per source size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from barrierflow.sinks.parquet import read_committed

from tests.recovery.harness import finish, window_rows, windowed_spec


@pytest.fixture(scope="session")
def reference_rows(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], list[tuple[Any, ...]]]:
    """``reference_rows(records)``: the committed rows of a run without failures."""
    cache: dict[int, list[tuple[Any, ...]]] = {}

    def get(records: int) -> list[tuple[Any, ...]]:
        if records not in cache:
            tmp: Path = tmp_path_factory.mktemp(f"reference-{records}")
            out = tmp / "out"
            finish(spark, windowed_spec(tmp, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                                        records=records))
            table = read_committed(f"file://{out}")
            cache[records] = window_rows(table.to_pylist() if table is not None else [])
            assert cache[records], "the reference run produced no windows"
        return cache[records]

    return get
