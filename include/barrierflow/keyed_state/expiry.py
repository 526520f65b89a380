"""Event-time TTL: when a key's state expires, and where its last update is kept.

A key's *last update* is the newest event time (milliseconds since the epoch, UTC) of any record
of the key since its state began; it is kept in the value state :data:`LAST_EVENT_STATE`
(schema :data:`LAST_EVENT_SCHEMA`) with the instant of the key's TTL timer, one event-time
timer registered at ``last update + ttl`` (null without a TTL). The state expires in the
first micro-batch whose watermark is at or past that instant: every state variable of the key
is cleared, and its timers deleted. Both the newest event time and the watermark are functions
of the input (the watermark of a batch is recorded in Spark's offset log and replayed with it),
so a replay expires the same keys in the same batches. Spark's processing-time TTL
(``ttlDurationMs``) is never used.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The value state holding a key's last update (reserved: user state names may not start with ``bf_``).
LAST_EVENT_STATE = "bf_last_event"
#: Its schema: the newest event time of the key and the instant of its TTL timer (null: none), ms since the epoch.
LAST_EVENT_SCHEMA = "last_event_ms long, expiry_ms long"
#: The column every input row carries into a keyed function: its event time in ms since the epoch.
EVENT_MS_COLUMN = "bf_event_ms"
#: The prefix of the state variable names barrierflow reserves.
RESERVED_PREFIX = "bf_"


@dataclass(frozen=True)
class EventTimeTTL:
    """``ttl_ms``: how long after its last update a key's state lives (None: forever);
    ``emit_on_expiry``: the function's :meth:`~barrierflow.keyed_state.KeyedFunction.on_expiry`
    rows are written when a key expires."""

    ttl_ms: int | None = None
    emit_on_expiry: bool = False

    @classmethod
    def from_seconds(cls, ttl_seconds: float | None, emit_on_expiry: bool = False) -> EventTimeTTL:
        return cls(None if ttl_seconds is None else round(ttl_seconds * 1000), emit_on_expiry)

    def expiry_ms(self, last_event_ms: int) -> int | None:
        """The instant a key last updated at ``last_event_ms`` expires (None without a TTL)."""
        return None if self.ttl_ms is None else last_event_ms + self.ttl_ms

    def expired(self, last_event_ms: int, watermark_ms: int) -> bool:
        """Whether a key last updated at ``last_event_ms`` has expired at ``watermark_ms``
        (the watermark is at or past its expiry instant)."""
        expiry = self.expiry_ms(last_event_ms)
        return expiry is not None and expiry <= watermark_ms
