"""Running count and sum per key as a keyed function: the TTL'd form of
``barrierflow.transforms.aggregations:keyed_running_totals``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from barrierflow.keyed_state.function import KeyedFunction

if TYPE_CHECKING:
    from pyspark.sql import Row

    from barrierflow.keyed_state.variables import KeyedState

#: The value state of a key's totals, and its schema.
TOTALS_STATE = "totals"
TOTALS_SCHEMA = "count long, value_sum long"


class RunningTotals(KeyedFunction):
    """Per key (``key``): the number of records and the sum of ``value`` since its state began;
    writes ``key, count, value_sum`` after each batch with records of the key (output mode
    update), and with ``emit_on_expiry`` an ``expired`` column (false on those rows) and one
    last row per expiry with the final totals and ``expired`` true."""

    def __init__(self, key_type: str, emit_on_expiry: bool) -> None:
        self.emit_on_expiry = emit_on_expiry
        self.output_schema = f"key {key_type}, count long, value_sum long" + (
            ", expired boolean" if emit_on_expiry else "")

    def open(self, state: KeyedState) -> None:
        self.totals = state.value(TOTALS_STATE, TOTALS_SCHEMA)

    def _row(self, key: tuple[Any, ...], count: int, value_sum: int, expired: bool) -> tuple[Any, ...]:
        return (key[0], count, value_sum, expired) if self.emit_on_expiry else (key[0], count, value_sum)

    def on_rows(self, key: tuple[Any, ...], rows: list[Row], watermark_ms: int) -> Iterable[tuple[Any, ...]]:
        current = self.totals.get() if self.totals.exists() else None
        count, value_sum = (int(current[0]), int(current[1])) if current else (0, 0)
        for row in rows:
            count += 1
            value_sum += int(row["value"]) if row["value"] is not None else 0
        self.totals.update((count, value_sum))
        yield self._row(key, count, value_sum, False)

    def on_expiry(self, key: tuple[Any, ...], watermark_ms: int) -> Iterable[tuple[Any, ...]]:
        current = self.totals.get() if self.totals.exists() else None
        if current:
            yield self._row(key, int(current[0]), int(current[1]), True)
