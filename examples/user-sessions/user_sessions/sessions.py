"""Sessions per user: a session closes after ``options.gap`` of event-time inactivity and is
written once, as one row (user, session_start, session_end, clicks).

The generator stands in for a clickstream: :func:`clicks` makes its records clicks of
``key % users`` users, each pausing three minutes in every ten of event time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from barrierflow.keyed_state import KeyedFunction, KeyedState, apply_keyed_function
from barrierflow.spec.durations import parse_duration_seconds
from barrierflow.transforms import TransformContext
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class Sessions(KeyedFunction):
    """Per user, the open session (first and last click in ms, clicks) in a value state and one
    event-time timer at its last click + ``gap_ms``: when the watermark reaches it, the session
    is written and the state cleared. A click more than ``gap_ms`` after the last one closes the
    open session and starts the next."""

    output_schema = "user bigint, session_start timestamp, session_end timestamp, clicks bigint"

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = gap_ms

    def open(self, state: KeyedState) -> None:
        self.state = state
        self.session = state.value("session", "first_ms long, last_ms long, clicks long")

    def _closed(self, user: Any, first: int, last: int, clicks: int) -> Row:
        return Row(user=user, session_start=_at(first), session_end=_at(last), clicks=clicks)

    def on_rows(self, key: tuple[Any, ...], rows: list[Row], watermark_ms: int) -> Iterable[Row]:
        current = self.session.get() if self.session.exists() else None
        first, last, clicks = (int(current[0]), int(current[1]), int(current[2])) if current else (None, None, 0)
        if last is not None:
            self.state.delete_timer(last + self.gap_ms)
        for row in rows:
            at = int(row["bf_event_ms"])
            if last is not None and at - last > self.gap_ms:
                yield self._closed(key[0], first, last, clicks)
                first, last, clicks = None, None, 0
            first = at if first is None else first
            last = at if last is None else max(last, at)
            clicks += 1
        self.session.update((first, last, clicks))
        self.state.register_timer(last + self.gap_ms)

    def on_timer(self, key: tuple[Any, ...], expiry_ms: int, watermark_ms: int) -> Iterable[Row]:
        first, last, clicks = (int(v) for v in self.session.get())
        self.session.clear()
        yield self._closed(key[0], first, last, clicks)


def clicks(df: DataFrame, users: int) -> DataFrame:
    """The generator's records as clicks: ``user = key % users``; a user is quiet in minutes
    7-9 of every ten (counted from the epoch, shifted by the user)."""
    minute = F.floor(F.unix_seconds("event_time") / 60)
    user = F.col("key") % users
    return (df.withColumn("user", user)
            .where(((minute + F.col("user")) % 10) < 7)
            .select("user", "event_time"))


def user_sessions(df: DataFrame, ctx: TransformContext) -> DataFrame:
    """Sessions per user (``options.gap``, default '2 minutes'; ``options.users``, default 5)."""
    gap_ms = round(parse_duration_seconds(ctx.options.get("gap", "2 minutes")) * 1000)
    return apply_keyed_function(clicks(df, int(ctx.options.get("users", 5))), ctx, Sessions(gap_ms), keys=["user"])
