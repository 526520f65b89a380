"""Row-by-row transformations: projecting columns (stages that pass records on)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.errors import SpecError
from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def project(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """``options.columns``: output column -> Spark SQL expression over the input columns, in
    order (e.g. ``{src_partition: partition, key: key, doubled: "value * 2"}``)."""
    columns = ctx.options.get("columns")
    if not isinstance(columns, dict) or not columns:
        raise SpecError("<spec>", [("transformation.options.columns",
                                    "project needs columns: a mapping of output column -> SQL expression")])
    return df.selectExpr(*(f"{expr} AS `{name}`" for name, expr in columns.items()))
