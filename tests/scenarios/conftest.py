"""The failure-free reference output, computed once per source size."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from barrierflow.sinks.parquet import read_committed

from tests.scenarios.harness import finish, window_rows, windowed_spec


@pytest.fixture(scope="session")
def reference_rows(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[tuple[Any, ...]]]:
    """``reference_rows(records, event_time_step_ms=None, *, keys=10, per_batch=400)``: the
    committed rows of a run without failures (of :func:`windowed_spec` with the same arguments)."""
    cache: dict[tuple[int, float | None, int, int], list[tuple[Any, ...]]] = {}

    def get(records: int, event_time_step_ms: float | None = None, *, keys: int = 10,
            per_batch: int = 400) -> list[tuple[Any, ...]]:
        key = (records, event_time_step_ms, keys, per_batch)
        if key not in cache:
            tmp: Path = tmp_path_factory.mktemp(f"reference-{records}")
            out = tmp / "out"
            finish(spark, windowed_spec(tmp, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                                        records=records, event_time_step_ms=event_time_step_ms, keys=keys,
                                        per_batch=per_batch))
            table = read_committed(f"file://{out}")
            cache[key] = window_rows(table.to_pylist() if table is not None else [])
            assert cache[key], "the reference run produced no windows"
        return cache[key]

    return get
