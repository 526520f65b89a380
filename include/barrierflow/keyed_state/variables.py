"""What a keyed function declares its state with (:meth:`KeyedFunction.open`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from barrierflow.errors import BarrierflowError
from barrierflow.keyed_state.expiry import LAST_EVENT_SCHEMA, LAST_EVENT_STATE, RESERVED_PREFIX

if TYPE_CHECKING:
    from pyspark.sql.streaming.stateful_processor import ListState, MapState, StatefulProcessorHandle, ValueState
    from pyspark.sql.types import StructType


class KeyedStateError(BarrierflowError):
    """A keyed function declared its state wrongly (a reserved or repeated name)."""


class KeyedState:
    """The state variables and event-time timers of the key being processed.

    Declare variables in :meth:`KeyedFunction.open` (once per task, not per key); each call
    returns Spark's variable object, scoped to the current key when used in ``on_rows``,
    ``on_timer`` and ``on_expiry``: ``ValueState`` (``get()``, ``update(tuple)``, ``exists()``,
    ``clear()``), ``ListState`` (``get()``, ``put(list)``, ``appendValue(tuple)``, ``clear()``),
    ``MapState`` (``getValue(k)``, ``updateValue(k, v)``, ``iterator()``, ``removeKey(k)``,
    ``clear()``). Schemas are DDL strings (``"count long, total double"``) or StructTypes.
    Names starting with ``bf_`` are barrierflow's. Timers are event-time instants in ms since
    the epoch; one fires (:meth:`KeyedFunction.on_timer`) in the first batch whose watermark is
    at or past it.
    """

    def __init__(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._variables: dict[str, Any] = {}
        self._last = handle.getValueState(LAST_EVENT_STATE, LAST_EVENT_SCHEMA)

    def last_update_ms(self) -> int | None:
        """The current key's last update: the newest event time (ms since the epoch) of its records
        before this batch's, None when the key has no state (new, or expired)."""
        if not self._last.exists():
            return None
        value = self._last.get()
        return None if value is None else int(value[0])

    def ttl_timer_ms(self) -> int | None:
        """The instant of the current key's TTL timer (None: it has none)."""
        value = self._last.get() if self._last.exists() else None
        return None if value is None or value[1] is None else int(value[1])

    def move_last_update(self, at_ms: int, expiry_ms: int | None) -> None:
        """Set the current key's last update and the instant of its TTL timer (barrierflow's
        processor does, after ``on_rows``; it registers the timer)."""
        self._last.update((int(at_ms), None if expiry_ms is None else int(expiry_ms)))

    def _declare(self, name: str) -> None:
        if name.startswith(RESERVED_PREFIX):
            raise KeyedStateError(f"state variable {name!r}: names starting with {RESERVED_PREFIX!r} are "
                                  "barrierflow's; rename it")
        if name in self._variables:
            raise KeyedStateError(f"state variable {name!r} is declared twice; declare each once in open()")

    def value(self, name: str, schema: str | StructType) -> ValueState:
        """A value state (one tuple per key) named ``name`` of ``schema``."""
        self._declare(name)
        variable = self._handle.getValueState(name, schema)
        self._variables[name] = variable
        return variable

    def list(self, name: str, schema: str | StructType) -> ListState:
        """A list state (a list of tuples per key) named ``name`` of element ``schema``."""
        self._declare(name)
        variable = self._handle.getListState(name, schema)
        self._variables[name] = variable
        return variable

    def map(self, name: str, key_schema: str | StructType, value_schema: str | StructType) -> MapState:
        """A map state (tuple -> tuple per key) named ``name``."""
        self._declare(name)
        variable = self._handle.getMapState(name, key_schema, value_schema)
        self._variables[name] = variable
        return variable

    def register_timer(self, at_ms: int) -> None:
        """Fire :meth:`KeyedFunction.on_timer` for the current key once the watermark reaches ``at_ms``."""
        self._handle.registerTimer(int(at_ms))

    def delete_timer(self, at_ms: int) -> None:
        """Delete the current key's timer at ``at_ms`` (nothing if there is none)."""
        self._handle.deleteTimer(int(at_ms))

    def timers(self) -> Iterator[int]:
        """The current key's registered timers (ms since the epoch)."""
        return iter(list(self._handle.listTimers()))

    def clear_all(self) -> None:
        """Clear every declared variable of the current key and its last update (the key's
        state is gone)."""
        for variable in self._variables.values():
            variable.clear()
        self._last.clear()
