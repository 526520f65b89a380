"""The transformation of examples/large-payments/pipeline.yaml."""

from __future__ import annotations

from barrierflow.transforms import TransformContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def large_payments(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The payments of at least ``options.min_amount`` (default 1.0), with the amount in cents;
    row by row, so output mode append writes each one once."""
    minimum = float(ctx.options.get("min_amount", 1.0))
    return (df.where(F.col("amount") >= minimum)
            .select("user_id", "amount", F.round(F.col("amount") * 100).cast("long").alias("amount_cents"),
                    "event_time"))
