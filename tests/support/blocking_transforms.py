"""A transformation whose micro-batches block, so that a test chooses when a batch is in flight:
every row passes through a Python UDF that, before returning, touches ``options["blocked"]`` and
waits (at most 120 s) until ``options["release"]`` exists."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from barrierflow.transforms.context import TransformContext
    from pyspark.sql import DataFrame

#: The longest a row waits for the release file.
LONGEST_WAIT_SECONDS = 120.0


def blocked_rows(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """``df``'s ``key`` and ``value``, each row held in the UDF until the release file exists."""
    from pyspark.sql import functions as F

    blocked, release = str(ctx.options["blocked"]), str(ctx.options["release"])

    def held(value):  # type: ignore[no-untyped-def]  # untyped: PySpark reads hints as a pandas UDF's
        import os
        import time

        if not os.path.exists(release):
            with open(blocked, "a", encoding="utf-8"):
                pass
        deadline = time.monotonic() + LONGEST_WAIT_SECONDS
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return value

    return df.select("key", F.udf(held, "long")(F.col("value")).alias("value"))
