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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from barrierflow.errors import SourceError


@dataclass(frozen=True)
class SourceOffset:
    partitions: dict[str, int]
    barrier: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0

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
