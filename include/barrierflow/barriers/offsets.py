"""The source offset format written into Spark's offset log.

Every barrierflow source returns, from ``latestOffset``, a JSON object::

    {"partitions": {"<partition>": <next offset>, ...}, "barrier": <n>, "attempt": <a>}

``partitions`` maps a source partition (``"0"`` for the generator, ``"topic:3"`` for Kafka)
to the offset of the next record to read (exclusive end of the batch). ``barrier`` is the
id of the newest checkpoint barrier injected at or before this position; it is *sticky*
(carried forward unchanged by every later batch), so batch V is the barrier batch of
checkpoint n exactly when ``offsets/V`` has ``barrier == n`` and ``offsets/V-1`` has a smaller
one. Because the decision lives in Spark's own offset write-ahead log, a replayed batch
replays the same barrier.

``attempt`` is the pipeline attempt (restores so far) that injected the barrier; it is written
only when not 0, so offsets of attempt 0 look exactly as before it existed. Like ``barrier``
it is carried forward by every later batch. Single-stage jobs leave it 0; downstream stages of
a multi-stage pipeline use it to skip records an older attempt produced after the restored
barrier.

``barrier_triggered_ms`` (optional) is when checkpoint ``barrier`` was triggered (Unix epoch,
ms), written by the batch that injects or forwards it and carried forward with it; a stage
writing channels puts it on its barrier records (:mod:`barrierflow.barriers.records`), so a
downstream stage counts its alignment timeout from the checkpoint's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from barrierflow.errors import SourceError

#: The key of :attr:`SourceOffset.extra` holding the trigger time of the sticky barrier.
BARRIER_TRIGGERED = "barrier_triggered_ms"


@dataclass(frozen=True)
class SourceOffset:
    partitions: dict[str, int]
    barrier: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0

    @property
    def barrier_triggered_ms(self) -> int | None:
        """When checkpoint :attr:`barrier` was triggered (Unix epoch, ms), if recorded."""
        value = self.extra.get(BARRIER_TRIGGERED)
        return int(value) if isinstance(value, int | float) else None

    def with_barrier(self, barrier: int, triggered_ms: int | None) -> SourceOffset:
        """This offset carrying ``barrier`` (triggered at ``triggered_ms``, if known) instead."""
        extra = {k: v for k, v in self.extra.items() if k != BARRIER_TRIGGERED}
        if triggered_ms is not None:
            extra[BARRIER_TRIGGERED] = int(triggered_ms)
        return SourceOffset(dict(self.partitions), barrier, extra, self.attempt)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partitions": dict(sorted(self.partitions.items())), "barrier": self.barrier}
        if self.attempt:
            out["attempt"] = self.attempt
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceOffset:
        try:
            parts = {str(k): int(v) for k, v in data["partitions"].items()}
            barrier = int(data.get("barrier", 0))
            attempt = int(data.get("attempt", 0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SourceError(
                f"not a barrierflow source offset: {data!r} ({exc}); was this Spark checkpoint "
                "written by another source? Use a fresh work_dir."
            ) from exc
        extra = {k: v for k, v in data.items() if k not in ("partitions", "barrier", "attempt")}
        return cls(parts, barrier, extra, attempt)
