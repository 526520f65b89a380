"""Transformations the state tests change a keyed-totals pipeline to (planned, and run by the
value-column upgrade test):
each differs from :func:`barrierflow.transforms.aggregations.keyed_running_totals` in one thing
its state holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from barrierflow.transforms.context import TransformContext
    from pyspark.sql import DataFrame


def totals_by_partition(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The same aggregates, grouped by the source partition instead of the key."""
    from pyspark.sql import functions as F

    return df.groupBy("partition").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"))


def totals_with_max(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The same grouping and aggregates, and one more: the largest value per key."""
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"),
                                 F.max("value").alias("value_max"))


def totals_count_and_max(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """:func:`totals_with_max` without the sum: the count and the largest value per key."""
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.max("value").alias("value_max"))
