"""The projection transformation (barrierflow.transforms.projection) on the shared SparkSession:
its ``where`` option, which the cycle pipeline's ``bounce`` stage filters with
(include/pipelines/cycle.yaml; the pipeline itself runs in tests/runtime/test_cycle_pipeline.py)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.spark]


def test_projection_where_keeps_only_matching_rows_and_rejects_an_empty_condition(spark: Any) -> None:
    """``bounce``'s filter: ``where`` keeps the rows for which it is true; an empty condition is
    a spec error naming the option."""
    from barrierflow.errors import SpecError
    from barrierflow.transforms.context import TransformContext
    from barrierflow.transforms.projection import project

    df = spark.createDataFrame([(1, 0), (2, 1), (3, 0)], "src_offset long, hops long")
    context = TransformContext(None, {"columns": {"src_offset": "src_offset", "hops": "hops + 1"},  # type: ignore[arg-type]
                                      "where": "hops < 1"})
    assert sorted(tuple(r) for r in project(df, context).collect()) == [(1, 1), (3, 1)]
    with pytest.raises(SpecError, match=r"transformation\.options\.where"):
        project(df, TransformContext(None, {"columns": {"x": "src_offset"}, "where": " "}))  # type: ignore[arg-type]
