"""Test transformations: the shipped keyed functions over a key space derived from event time.

The generator's ``key`` is ``n % 10``; these map it to a key of a two-minute block of event
time (``block`` = minutes since the generator's start // 2):

* ``key < 5``, churning keys: ``1000 + 5 * block + key``, live for one block, never again;
* ``key >= 5``, returning keys: ``5 * (block % 3) + key - 5``, live one block in three
  (two blocks, 240 s of event time, of silence between).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.keyed_state import supports_ttl
from barrierflow.transforms.aggregations import keyed_running_totals
from barrierflow.transforms.context import TransformContext
from barrierflow.transforms.deduplication import deduplicate_by_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The generator's first event time (its default), in seconds since the epoch.
START_S = 1767225600  # 2026-01-01T00:00:00Z
BLOCK_S = 120


def churning_key(key: int, event_s: float) -> int:
    """The derived key of a record (the rule of the module docstring, in plain Python)."""
    block = int((event_s - START_S) // BLOCK_S)
    return 1000 + 5 * block + key if key < 5 else 5 * (block % 3) + key - 5


def _churned(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    block = F.floor((F.unix_micros("event_time") / 1_000_000 - START_S) / BLOCK_S)
    key = F.when(F.col("key") < 5, 1000 + 5 * block + F.col("key")).otherwise(5 * (block % 3) + F.col("key") - 5)
    return df.withColumn("key", key.cast("bigint"))


@supports_ttl
def churning_totals(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """keyed_running_totals over the churning key space."""
    return keyed_running_totals(_churned(df), ctx)


@supports_ttl
def churning_dedup(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """deduplicate_by_key over the churning key space."""
    return deduplicate_by_key(_churned(df).drop("offset", "partition"), ctx)


def churning_only(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The records of the churning keys (``key < 5``: each derived key lives one block and never
    returns), as ``key, value, event_time``: the first stage of the channel test."""
    from pyspark.sql import functions as F

    return df.where(F.col("key") < 5).select("key", "value", "event_time")
