"""The Nexmark queries q0, q1, q2, q5, q7 and q8 as barrierflow transformations, and their specs.

Every query reads the one topic of :mod:`bench.nexmark.generator` through Spark's connector
(``reader: spark``, ``format: json``: barrierflow's JVM decoder) and decodes only the fields it
uses (:attr:`Query.fields`, the same list the Flink SQL job declares). Event time is the events'
``date_time``; the windowed queries set Spark's watermark on every event (before picking a kind,
as Flink's nexmark declares it on the source table) at ``date_time`` minus
:data:`WATERMARK_DELAY` (4 s, Flink's nexmark's) and write each window's rows once (append).
Spark's optimizer pushes the choice of kind below the watermark, so a query's watermark follows
the kinds it reads (q5 and q7 the bids, q8 persons and auctions); the generator interleaves the
kinds evenly in event time, so this moves it by a few milliseconds at most.

* **q0** passthrough: every bid (auction, bidder, price, date_time, extra).
* **q1** currency conversion: every bid, its price times 0.908 (dollars to euros).
* **q2** selection: the bids of every 123rd auction (``auction % 123 == 0``): auction, price.
* **q5** hot items: per sliding window of 10 s every 2 s, the auction(s) with the most bids
  (all ties): window_start, window_end, auction, num. Two chained window aggregations (bids per
  auction and window, then the largest count per window with the auctions that have it).
* **q7** highest bid: per tumbling window of 10 s, the bid with the highest price (ties: the
  greatest (price, auction, bidder, date_time, extra)): window_start, window_end, auction,
  price, bidder, date_time, extra. One window aggregation of the largest struct.
* **q8** monitor new users: persons who created an auction in the 10 s tumbling window in which
  they joined: id, name, window_start. The window join of persons and auctions on
  ``id = seller`` computed as one window aggregation of both kinds keyed by person
  (``id`` of a person, ``seller`` of an auction): a key with a person and an auction in the
  window is a match (persons are unique per id, so this is the join's distinct result).

Flink SQL runs the nexmark project's texts of the same queries (:mod:`bench.nexmark.flink_job`);
where its plan differs (q7: a join of the bids with each window's highest price, which returns
every tied bid; q5 and q8: joins of window aggregations) the rows are the same up to ties.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.transforms.context import TransformContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Spark's (and Flink's) watermark: the newest event time minus this.
WATERMARK_DELAY = "4 seconds"
WINDOW = "10 seconds"
HOP_SLIDE = "2 seconds"
#: barrierflow's trigger interval (seconds), as the Kafka benchmark's.
TRIGGER = 0.1


def _bids(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.where(F.col("event_type") == 2)


def q0(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Passthrough: every bid."""
    return _bids(df).select("auction", "bidder", "price", "date_time", "extra")


def q1(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Currency conversion: every bid, price times 0.908 (a decimal, as in Flink SQL)."""
    from pyspark.sql import functions as F

    return _bids(df).select("auction", "bidder", (F.lit(0.908).cast("decimal(3,3)") * F.col("price")).alias("price"),
                            "date_time", "extra")


def q2(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Selection: the bids of auctions whose id is a multiple of 123."""
    from pyspark.sql import functions as F

    return _bids(df).where(F.col("auction") % 123 == 0).select("auction", "price")


def q5(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Hot items (module docstring)."""
    from pyspark.sql import functions as F

    counts = (_bids(ctx.with_watermark(df))
              .groupBy(F.window("date_time", WINDOW, HOP_SLIDE).alias("w"), "auction")
              .agg(F.count(F.lit(1)).alias("num")))
    # each sliding window has its own end, so a tumbling window of the slide over the window's
    # time (its end less 1 microsecond) holds exactly that window's rows
    per_window = (counts.groupBy(F.window(F.window_time("w"), HOP_SLIDE).alias("slot"))
                  .agg(F.max("num").alias("maxn"), F.collect_list(F.struct("auction", "num")).alias("all")))
    return (per_window
            .select(F.col("slot.end").alias("window_end"), F.col("maxn"),
                    F.explode(F.filter("all", lambda x: x["num"] == F.col("maxn"))).alias("top"))
            .select((F.col("window_end") - F.expr(f"INTERVAL {WINDOW}")).alias("window_start"), "window_end",
                    F.col("top.auction").alias("auction"), F.col("top.num").alias("num")))


def q7(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Highest bid per tumbling window (module docstring)."""
    from pyspark.sql import functions as F

    return (_bids(ctx.with_watermark(df))
            .groupBy(F.window("date_time", WINDOW).alias("w"))
            .agg(F.max(F.struct("price", "auction", "bidder", "date_time", "extra")).alias("top"))
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "top.auction", "top.price", "top.bidder", "top.date_time", "top.extra"))


def q8(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Monitor new users (module docstring)."""
    from pyspark.sql import functions as F

    person = F.col("event_type") == 0
    return (ctx.with_watermark(df).where(F.col("event_type").isin(0, 1))
            .withColumn("person", F.when(person, F.col("id")).otherwise(F.col("seller")))
            .groupBy(F.window("date_time", WINDOW).alias("w"), "person")
            .agg(F.max(F.when(person, F.col("name"))).alias("name"),
                 F.max(person.cast("int")).alias("joined"), F.max((~person).cast("int")).alias("sold"))
            .where((F.col("joined") == 1) & (F.col("sold") == 1))
            .select(F.col("person").alias("id"), "name", F.col("w.start").alias("window_start")))


@dataclass(frozen=True)
class Query:
    """One query: its transformation, the event fields it decodes (name -> barrierflow's
    ``json_fields`` type) and whether it is windowed (event time, watermark, append of closed
    windows)."""

    name: str
    function: Callable[[DataFrame, TransformContext], DataFrame]
    fields: dict[str, str]
    windowed: bool


_BID = {"event_type": "long", "auction": "long", "bidder": "long", "price": "long", "date_time": "timestamp",
        "extra": "string"}
QUERIES: dict[str, Query] = {q.name: q for q in (
    Query("q0", q0, _BID, False),
    Query("q1", q1, _BID, False),
    Query("q2", q2, {"event_type": "long", "auction": "long", "price": "long", "date_time": "timestamp"}, False),
    Query("q5", q5, {"event_type": "long", "auction": "long", "date_time": "timestamp"}, True),
    Query("q7", q7, _BID, True),
    Query("q8", q8, {"event_type": "long", "id": "long", "name": "string", "seller": "long",
                     "date_time": "timestamp"}, True),
)}


def pipeline_spec(query: Query, *, servers: str, topic: str, work: Path, batch: int,
                  sink: dict[str, Any] | None = None, master: str = "local[2]",
                  conf: dict[str, str] | None = None) -> dict[str, Any]:
    """The spec (a dict for :func:`barrierflow.spec.parse_spec`) of ``query`` over ``topic``:
    Spark's connector at most ``batch`` records per partition and batch, checkpoints every 1 s
    under ``work``, ``sink`` (default ``discard``), ``master``'s cores and as many shuffle
    partitions."""
    cores = int(master.removeprefix("local[").rstrip("]")) if master.startswith("local[") else 2
    spec: dict[str, Any] = {
        "version": 1, "name": f"nexmark-{query.name}-{uuid.uuid4().hex[:8]}", "work_dir": str(work / "work"),
        "sources": [{"name": "events", "type": "kafka", "reader": "spark", "bootstrap_servers": servers,
                     "topics": [topic], "format": "json", "json_fields": dict(query.fields),
                     "max_records_per_batch": batch, "malformed": "nulls"}],
        "transformation": {"function": f"{__name__}:{query.name}", "output_mode": "append"},
        "sinks": [sink or {"name": "out", "type": "discard"}],
        "trigger": {"interval": TRIGGER},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": 1.0, "timeout": 120.0,
                       "tolerable_failed_checkpoints": 1000},
        "spark": {"master": master, "shuffle_partitions": cores, **({"conf": conf} if conf else {})},
    }
    if query.windowed:
        spec["event_time"] = {"column": "date_time", "watermark_delay": WATERMARK_DELAY.replace(" seconds", "s")}
    return spec
