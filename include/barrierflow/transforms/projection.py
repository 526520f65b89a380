"""Row-by-row transformations: projecting columns (stages that pass records on)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.errors import SpecError
from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def project(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """``options.columns``: output column -> Spark SQL expression over the input columns, in
    order (e.g. ``{src_partition: partition, key: key, doubled: "value * 2"}``).

    ``options.where`` (optional): a Spark SQL condition over the input columns; only rows for
    which it is true are projected (e.g. ``"hops < 1"``, which lets a stage on a feedback loop
    send each record around the loop once)."""
    columns = ctx.options.get("columns")
    if not isinstance(columns, dict) or not columns:
        raise SpecError("<spec>", [("transformation.options.columns",
                                    "project needs columns: a mapping of output column -> SQL expression")])
    where = ctx.options.get("where")
    if where is not None:
        if not isinstance(where, str) or not where.strip():
            raise SpecError("<spec>", [("transformation.options.where",
                                        "where must be a Spark SQL condition over the input columns, e.g. 'hops < 1'")])
        df = df.where(where)
    return df.selectExpr(*(f"{expr} AS `{name}`" for name, expr in columns.items()))
