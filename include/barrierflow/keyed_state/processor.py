"""The Spark ``StatefulProcessor`` that runs a :class:`KeyedFunction` with an event-time TTL.

Per key and micro-batch (Spark calls the data first, then the timers the watermark passed):

1. rows: if the key's state expired at this batch's watermark while its timer has not fired yet
   (its rows come first), it expires now (final rows with ``emit_on_expiry``, state cleared);
   then :meth:`KeyedFunction.on_rows` with the rows ordered by event time; then the last update
   (:data:`~barrierflow.keyed_state.expiry.LAST_EVENT_STATE`) moves to the newest event time
   seen and the TTL timer with it;
2. timers: the TTL timer expires the key; any other timer goes to :meth:`KeyedFunction.on_timer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from barrierflow.keyed_state.expiry import EVENT_MS_COLUMN, EventTimeTTL
from barrierflow.keyed_state.variables import KeyedState

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, StatefulProcessorHandle, TimerValues

    from barrierflow.keyed_state.figures import KeyCounters
    from barrierflow.keyed_state.function import KeyedFunction


def _order(row: Row) -> tuple[Any, ...]:
    """A row's place in its key's batch: event time, then its values (as text: any type, None too)."""
    return (row[EVENT_MS_COLUMN], tuple(repr(v) for v in row))


def _as_key(key: Any) -> tuple[Any, ...]:
    return key if isinstance(key, tuple) else (key,)


class KeyedProcessor(StatefulProcessor):
    """Spark's side of a keyed function: ``function`` under ``ttl`` (see the module docstring).
    Always tracks the last update (a function may ask whether its key was seen before, as the
    deduplication does); a timer only with a TTL."""

    def __init__(self, function: KeyedFunction, ttl: EventTimeTTL, output_fields: list[str],
                 counters: KeyCounters | None = None) -> None:
        self.function = function
        self.ttl = ttl
        self.output_fields = output_fields
        #: keys started and expired, counted for the run's figures (:mod:`barrierflow.keyed_state.figures`)
        self.counters = counters

    def _rows(self, results: Iterable[Any]) -> Iterator[Row]:
        """The function's results as Rows of the output schema (a tuple is taken in its order)."""
        from pyspark.sql import Row

        for result in results:
            yield result if isinstance(result, Row) else Row(**dict(zip(self.output_fields, result, strict=True)))

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._state = KeyedState(handle)
        self.function.open(self._state)

    def _expire(self, key: tuple[Any, ...], last: int, watermark_ms: int, fired: int | None) -> Iterator[Any]:
        if self.counters is not None:
            self.counters.expired.add(1)
        if self.ttl.emit_on_expiry:
            yield from self._rows(self.function.on_expiry(key, watermark_ms))
        self._state.clear_all()
        for at in self._state.timers():
            if at != fired:  # Spark deletes the timer that fired once its rows are consumed
                self._state.delete_timer(at)

    def _move_ttl_timer(self, last: int) -> None:
        """Keep one TTL timer, at ``last`` + the TTL (none without a TTL), and record it."""
        wanted = self.ttl.expiry_ms(last)
        registered = self._state.ttl_timer_ms()
        if registered is not None and registered != wanted:
            self._state.delete_timer(registered)
        if wanted is not None and registered != wanted:
            self._state.register_timer(wanted)
        self._state.move_last_update(last, wanted)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Any]:
        watermark = timerValues.getCurrentWatermarkInMs()
        key = _as_key(key)
        ordered = sorted(rows, key=_order)
        last = self._state.last_update_ms()
        if last is not None and self.ttl.expired(last, watermark):
            yield from self._expire(key, last, watermark, None)
            last = None
        if last is None and ordered and self.counters is not None:
            self.counters.started.add(1)
        yield from self._rows(self.function.on_rows(key, ordered, watermark))
        newest = max(int(r[EVENT_MS_COLUMN]) for r in ordered) if ordered else last
        if newest is not None:
            self._move_ttl_timer(newest if last is None else max(last, newest))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:
        """The TTL timer (the one recorded with the last update) expires the key, unless the TTL
        changed since it was registered (a new spec): then the timer moves to the new expiry
        (with the TTL removed, none). Any other timer is the function's."""
        watermark = timerValues.getCurrentWatermarkInMs()
        fired = expiredTimerInfo.getExpiryTimeInMs()
        key = _as_key(key)
        last = self._state.last_update_ms()
        if last is None or fired != self._state.ttl_timer_ms():
            yield from self._rows(self.function.on_timer(key, fired, watermark))
        elif self.ttl.expired(last, watermark):
            yield from self._expire(key, last, watermark, fired)
        else:
            self._state.move_last_update(last, None)  # the fired timer is gone (Spark deletes it)
            self._move_ttl_timer(last)

    def close(self) -> None:
        pass

