"""The transformations of examples/two-stages/pipeline.yaml."""

from __future__ import annotations

from barrierflow.transforms import TransformContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def tag_orders(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Stage ``tag``: each generated record as an order, tagged ``big`` when its value is at
    least ``options.big_from`` (default 500). The columns are what stage ``big`` reads from the
    channel (its ``json_fields``)."""
    big_from = int(ctx.options.get("big_from", 500))
    return df.select(F.col("key").alias("customer"), F.col("value").alias("amount"),
                     (F.col("value") >= big_from).alias("big"), "event_time")


def big_orders(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Stage ``big``: the big orders only, with the channel partition and offset they came from."""
    return df.where("big").select("customer", "amount", "event_time",
                                  F.col("partition").alias("channel_partition"))
