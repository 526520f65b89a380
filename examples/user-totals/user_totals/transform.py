"""The transformation of examples/user-totals/pipeline.yaml."""

from __future__ import annotations

from barrierflow.transforms import TransformContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def per_user_minute_sums(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Per user and tumbling event-time window (``options.window``, default 1 minute): the sum
    and count of the payments. Output mode append: each (window, user) row is written once,
    after the watermark (newest event time minus ``event_time.watermark_delay``) passed the
    window's end."""
    window = str(ctx.options.get("window", "1 minute"))
    return (
        ctx.with_watermark(df)
        .groupBy(F.window(ctx.event_time_column, window).alias("w"), F.col("user_id"))
        .agg(F.sum("amount").alias("total"), F.count(F.lit(1)).alias("payments"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                "user_id", "total", "payments")
    )
