"""Attempt fences: which channel records an older attempt wrote after the restored barrier.

After a multi-stage pipeline is restored to global checkpoint ``n``, its attempt number
increases and every stage re-produces what followed its barrier ``n``. The records an older
attempt had already written to a channel after barrier ``n`` are still in the log; a downstream
source must skip them, or they would be counted twice. A restore therefore records one
:class:`AttemptFence` per reading stage: the new attempt and, per input partition, the offset
of the restored barrier record (from the stage's manifest ``n``, ``alignment.barrier_offsets``).

Rule (:meth:`StaleRecords.is_stale`): a record at ``offset`` of ``partition`` written by attempt
``a`` is stale when some fence with ``fence.attempt > a`` has ``offset > fence.offsets[partition]``.
Records before the restored barrier, including an unaligned checkpoint's channel state
(between the snapshot cut and the barrier), are kept. Fences accumulate over restores.
Records without an attempt header (not written by a stage) are never stale.

Stored by the restore as ``_fences.json`` in the pipeline's checkpoint store (a JSON list of
``{"attempt": a, "restored": n, "stages": {stage: {partition: offset}}}``) and handed to each
channel source as its stage's list of ``{"attempt", "offsets"}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AttemptFence:
    attempt: int
    offsets: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "offsets": dict(sorted(self.offsets.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptFence:
        return cls(int(data["attempt"]), {str(p): int(o) for p, o in data["offsets"].items()})


class StaleRecords:
    """The fences of one stage; see the module docstring."""

    def __init__(self, fences: Iterable[AttemptFence] = ()) -> None:
        self.fences = tuple(fences)

    def is_stale(self, partition: str, offset: int, attempt: int | None) -> bool:
        if attempt is None:
            return False
        return any(f.attempt > attempt and partition in f.offsets and offset > f.offsets[partition]
                   for f in self.fences)
