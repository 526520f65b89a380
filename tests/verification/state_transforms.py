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



def totals_with_a_poisoned_key(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """:func:`~barrierflow.transforms.aggregations.keyed_running_totals` with every record of key
    0 counted 1000 times: the same stateful operator over the same columns (a change the upgrade
    report calls compatible: how the aggregation's input rows are produced upstream is not part
    of its fingerprint), an impossible state (key 0 counts more records than the source has)."""
    from barrierflow.transforms.aggregations import keyed_running_totals
    from pyspark.sql import functions as F

    copies = F.when(F.col("key") == 0, F.array_repeat(F.lit(1), 1000)).otherwise(F.array(F.lit(1)))
    return keyed_running_totals(df.select("*", F.explode(copies).alias("copy")).drop("copy"), ctx)
