"""Keyed state of the user's own, with an event-time TTL, on Spark's ``transformWithState``.

A :class:`KeyedFunction` is called per key and micro-batch with that key's rows; it keeps value,
list and map state and event-time timers (:class:`KeyedState`). With ``transformation.ttl`` in
the spec, a key's state expires when the watermark passes its newest event time plus the TTL
(:mod:`barrierflow.keyed_state.expiry`): expiry depends on the input and the watermark only, so a
replay after a restore expires the same keys in the same batches. :func:`apply_keyed_function`
runs one on a stage's input; :func:`supports_ttl` marks a transformation that accepts ``ttl``.
See docs/state.md ("Event-time TTL") and the sessions example in examples/.
"""

from barrierflow.keyed_state.apply import apply_keyed_function
from barrierflow.keyed_state.expiry import EVENT_MS_COLUMN, LAST_EVENT_SCHEMA, LAST_EVENT_STATE, EventTimeTTL
from barrierflow.keyed_state.function import KeyedFunction
from barrierflow.keyed_state.support import supports_ttl, ttl_supported
from barrierflow.keyed_state.variables import KeyedState

__all__ = ["EVENT_MS_COLUMN", "LAST_EVENT_SCHEMA", "LAST_EVENT_STATE", "EventTimeTTL", "KeyedFunction",
           "KeyedState", "apply_keyed_function", "supports_ttl", "ttl_supported"]
