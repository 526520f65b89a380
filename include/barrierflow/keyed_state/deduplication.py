"""Deduplication by key as a keyed function: the first record of each key, per state lifetime."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from barrierflow.keyed_state.function import KeyedFunction

if TYPE_CHECKING:
    from pyspark.sql import Row

    from barrierflow.keyed_state.variables import KeyedState


class FirstPerKey(KeyedFunction):
    """Writes a key's first record (the smallest event time of the first batch with records of
    the key; ties by the row's values) and drops every later record of the key while its state
    lives (while it has a last update). Every record,
    duplicates too, moves the key's last update, so with a TTL a key expires ``ttl`` after its
    newest record; a record after that is a first record again. ``columns``: the output columns."""

    def __init__(self, output_schema: str, columns: list[str]) -> None:
        self.output_schema = output_schema
        self.columns = columns

    def open(self, state: KeyedState) -> None:
        self.state = state

    def on_rows(self, key: tuple[Any, ...], rows: list[Row], watermark_ms: int) -> Iterable[tuple[Any, ...]]:
        if rows and self.state.last_update_ms() is None:
            first = rows[0]
            yield tuple(first[c] for c in self.columns)
