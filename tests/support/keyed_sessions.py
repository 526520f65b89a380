"""A keyed function of the tests' own, on Spark's plain ``transformWithState`` (no barrierflow
API): what any user's keyed state looks like to Spark, for the state tools' tests.

Keys churn: the key of record ``offset`` of source partition ``partition`` is ``(partition,
offset // SPAN)``, so a key gets :data:`SPAN` consecutive records and never returns. Per key the
processor keeps a value state ``count`` (records so far), a list state ``recent`` (the last three
values), a map state ``parity`` (``even``/``odd`` -> records), a value state ``bf_last_event``
(its newest event time, the layout barrierflow's keyed state keeps for a ttl) and one event-time
timer at that event time plus :data:`GAP_MS`. Output (append): one row per record, ``(partition,
session, offset, n)`` with ``n`` the key's running count; and one closing row per key when its
timer fires (``offset`` -1, ``n`` its count), which clears every state variable of the key.
Each key's records come from one partition in offset order, so the rows are a pure function of
the input, whatever the batches, the partitions and the restarts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

if TYPE_CHECKING:
    from barrierflow.transforms.context import TransformContext
    from pyspark.sql import DataFrame

#: Records per key.
SPAN = 10
#: How long after its newest event a key's timer fires (event time, ms).
GAP_MS = 1000
OUTPUT = "partition int, session bigint, offset bigint, n bigint"


class Sessions(StatefulProcessor):
    """The keyed function (module docstring); ``count_type``: the type of ``count`` (a test changes it)."""

    count_type = "bigint"
    extra_variable = False

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", f"n {self.count_type}")
        self.recent = handle.getListState("recent", "value bigint")
        self.parity = handle.getMapState("parity", "parity string", "records bigint")
        self.last = handle.getValueState("bf_last_event", "last_event_ms bigint")
        if self.extra_variable:
            self.extra = handle.getValueState("largest", "value bigint")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        from pyspark.sql import Row

        ordered = sorted(rows, key=lambda r: r["offset"])
        n = int(self.count.get()[0]) if self.count.exists() else 0
        recent = [int(r[0]) for r in self.recent.get()] if self.recent.exists() else []
        newest = int(self.last.get()[0]) if self.last.exists() else None
        for row in ordered:
            n += 1
            recent = ([*recent, int(row["value"])])[-3:]
            side = "even" if int(row["value"]) % 2 == 0 else "odd"
            seen = self.parity.getValue((side,)) if self.parity.containsKey((side,)) else None
            self.parity.updateValue((side,), ((int(seen[0]) if seen else 0) + 1,))
            at = int(row["event_time"].timestamp() * 1000)
            newest = at if newest is None else max(newest, at)
            yield Row(partition=int(key[0]), session=int(key[1]), offset=int(row["offset"]), n=n)
        if self.last.exists():
            self.handle.deleteTimer(int(self.last.get()[0]) + GAP_MS)
        assert newest is not None
        self.count.update((n,))
        self.recent.put([(v,) for v in recent])
        self.last.update((newest,))
        self.handle.registerTimer(newest + GAP_MS)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        from pyspark.sql import Row

        n = int(self.count.get()[0]) if self.count.exists() else 0
        for state in (self.count, self.recent, self.parity, self.last):
            state.clear()
        yield Row(partition=int(key[0]), session=int(key[1]), offset=-1, n=n)

    def close(self) -> None:
        pass


class SessionsWithLargest(Sessions):
    """:class:`Sessions` with one more state variable (``largest``), never written."""

    extra_variable = True


class SessionsCountAsString(Sessions):
    """:class:`Sessions` whose ``count`` holds a string: a changed state type."""

    count_type = "string"


def _apply(df: DataFrame, ctx: TransformContext, processor: StatefulProcessor) -> DataFrame:
    from pyspark.sql import functions as F

    keyed = ctx.with_watermark(df).withColumn("session", F.floor(F.col("offset") / SPAN).cast("bigint"))
    return (keyed.groupBy("partition", "session")
            .transformWithState(processor, OUTPUT, "Append", "EventTime"))


def sessions(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """The keyed function (module docstring)."""
    return _apply(df, ctx, Sessions())


def sessions_with_largest(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """With one more state variable."""
    return _apply(df, ctx, SessionsWithLargest())


def sessions_count_as_string(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """With ``count`` of another type."""
    return _apply(df, ctx, SessionsCountAsString())


def expected_rows(partitions: int, records: int) -> tuple[set[tuple[int, int, int, int]], dict[tuple[int, int], int]]:
    """What the keyed function outputs for a generator of ``partitions`` x ``records``,
    computed independently: every record's row ``(partition, session, offset, n)``, and per key
    ``(partition, session)`` the count its closing row (if any) must carry."""
    rows = {(p, i // SPAN, i, i % SPAN + 1) for p in range(partitions) for i in range(records)}
    counts = {(p, s): min(SPAN, records - s * SPAN) for p in range(partitions) for s in range((records + SPAN - 1)
                                                                                           // SPAN)}
    return rows, counts
