"""Stateful aggregations used by the demo pipeline and the reference benchmark job."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.errors import SpecError
from barrierflow.keyed_state.support import supports_ttl
from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def keyed_window_counts(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Per key and tumbling event-time window (``options.window``, default '10 seconds'):
    record count and value sum. Needs ``event_time`` in the spec; with output mode append,
    each (window, key) row is emitted exactly once, after the watermark passes the window."""
    from pyspark.sql import functions as F

    column = ctx.event_time_column
    if column is None:
        raise SpecError("<spec>", [("event_time", "keyed_window_counts needs event_time.column and "
                                                  "event_time.watermark_delay")])
    window = str(ctx.options.get("window", "10 seconds"))
    return (
        ctx.with_watermark(df)
        .groupBy(F.window(column, window).alias("w"), F.col("key"))
        .agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                "key", "count", "value_sum")
    )


@supports_ttl
def keyed_running_totals(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The reference benchmark job: running count and sum per key (output mode update).

    Without ``transformation.ttl``: Spark's streaming aggregation, whose state keeps every key
    ever seen. With it: the keyed function
    :class:`~barrierflow.keyed_state.running_totals.RunningTotals` on ``transformWithState``, a
    key's totals expiring ``ttl`` of event time after its newest record (a later record of the
    key starts from zero); with ``emit_on_expiry`` an ``expired`` column and one final row per
    expiry. Changing ``ttl`` between absent and set changes the state's operator: a new
    checkpoint, or ``barrierflow upgrade``."""
    from pyspark.sql import functions as F

    if ctx.ttl_seconds is not None:
        from barrierflow.keyed_state import apply_keyed_function
        from barrierflow.keyed_state.running_totals import RunningTotals

        key_type = df.schema["key"].dataType.simpleString()
        return apply_keyed_function(df, ctx, RunningTotals(key_type, ctx.emit_on_expiry))
    return df.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"))


def keyed_running_totals_with_max(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """:func:`keyed_running_totals` and the largest value per key (``value_max``): the reference
    job given a new state column (the upgrade benchmark's value-column case)."""
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"),
                                 F.max("value").alias("value_max"))
