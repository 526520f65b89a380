"""The user's stateful function per key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Row
    from pyspark.sql.types import StructType

    from barrierflow.keyed_state.variables import KeyedState


class KeyedFunction:
    """Subclass this for a stateful function per key; run it with
    :func:`barrierflow.keyed_state.apply_keyed_function`.

    Contract:

    * ``output_schema`` (class or instance attribute): the rows it yields, a DDL string or a
      StructType; yield ``pyspark.sql.Row`` objects with these fields (or tuples in their order).
    * :meth:`open` declares the state (once per task, before any key): ``state.value(...)`` etc.
    * :meth:`on_rows` gets the key (a tuple of the grouping columns' values) and the key's rows of
      one micro-batch, ordered by event time (ties by their values), so a replayed batch sees the
      same order; each row has the input's columns and ``bf_event_ms`` (its event time, ms since
      the epoch). ``watermark_ms`` is the batch's event-time watermark.
    * :meth:`on_timer`: a timer the function registered fired (the watermark reached ``expiry_ms``).
    * :meth:`on_expiry` (with ``transformation.ttl`` and ``emit_on_expiry: true``): the key's
      state expired; yield its final row(s). The state is still readable here and cleared after.

    Everything the function does must depend on its rows, its state and ``watermark_ms`` only (no
    wall clock, no randomness), or a replay writes different output than the first run did.
    """

    output_schema: str | StructType = ""

    def open(self, state: KeyedState) -> None:
        """Declare the state variables (and keep them on ``self``)."""

    def on_rows(self, key: tuple[Any, ...], rows: list[Row], watermark_ms: int) -> Iterable[Row | tuple[Any, ...]]:
        """The key's rows of one micro-batch; returns the rows to write."""
        raise NotImplementedError(f"{type(self).__name__} must define on_rows(key, rows, watermark_ms)")

    def on_timer(self, key: tuple[Any, ...], expiry_ms: int, watermark_ms: int) -> Iterable[Row | tuple[Any, ...]]:
        """A timer registered for ``key`` at ``expiry_ms`` fired; returns the rows to write."""
        return ()

    def on_expiry(self, key: tuple[Any, ...], watermark_ms: int) -> Iterable[Row | tuple[Any, ...]]:
        """``key``'s state expired (TTL) and ``emit_on_expiry`` is set; returns its final rows."""
        return ()
