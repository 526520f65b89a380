"""Test transformations whose state can be altered on purpose (deep verification tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def signed_counts(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Per key: a running count of records. With ``options.poison`` the count of key 0
    decreases by 1000 per record instead: the same state schema, an impossible state."""
    from pyspark.sql import functions as F

    step = F.lit(1)
    if ctx.options.get("poison"):
        step = F.when(F.col("key") == 0, F.lit(-1000)).otherwise(F.lit(1))
    return df.groupBy("key").agg(F.sum(step.cast("long")).alias("records"))
