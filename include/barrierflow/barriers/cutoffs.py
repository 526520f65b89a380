"""Attempt cutoffs: which channel records an older attempt wrote after the restored barrier.

After a multi-stage pipeline is restored to global checkpoint ``n``, its attempt number
increases and every stage re-produces what followed its barrier ``n``. The records an older
attempt had already written to a channel after barrier ``n`` are still in the log; a downstream
source must skip them, or they would be counted twice. A restore therefore records one
:class:`AttemptCutoff` per reading stage: the new attempt and, per input partition, the offset
of the restored barrier record (from the stage's manifest ``n``, ``alignment.barrier_offsets``;
``-1`` for a restore to the initial cut, so that everything older attempts wrote is skipped).

Rule (:meth:`StaleRecords.is_stale`): a record at ``offset`` of ``partition`` written by attempt
``a`` is stale when some cutoff with ``cutoff.attempt > a`` has ``offset > cutoff.offsets[partition]``.
Records before the restored barrier, including an unaligned checkpoint's channel state
(between the snapshot cut and the barrier), are kept. Cutoffs accumulate over restores.
Records without an attempt header (not written by a stage) are never stale.

Stored by the restore as ``_cutoffs.json`` in the pipeline's checkpoint store (a JSON list of
``{"attempt": a, "restored": n, "stages": {stage: {partition: offset}}}``; stores of earlier
releases have the same list as ``_fences.json``, see :mod:`barrierflow.checkpointing.global_store`)
and handed to each channel source as its stage's list of ``{"attempt", "offsets"}``.

(Named for what it is: an offset past which an older attempt's records are cut off. "Fence" in
barrierflow means one thing only: the lease's fencing number, :mod:`barrierflow.lease`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AttemptCutoff:
    """One restore's cutoff for one stage: records of attempts below ``attempt`` after
    ``offsets[partition]`` (``topic:partition`` -> offset of the restored barrier) are stale."""

    attempt: int
    offsets: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "offsets": dict(sorted(self.offsets.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptCutoff:
        return cls(int(data["attempt"]), {str(p): int(o) for p, o in data["offsets"].items()})


class StaleRecords:
    """The attempt cutoffs of one stage; see the module docstring."""

    def __init__(self, cutoffs: Iterable[AttemptCutoff] = ()) -> None:
        self.cutoffs = tuple(cutoffs)

    def is_stale(self, partition: str, offset: int, attempt: int | None) -> bool:
        """Whether the record at ``offset`` of ``partition``, written by ``attempt`` (None: no
        attempt header), was cut off by a later restore (the rule in the module docstring)."""
        if attempt is None:
            return False
        return any(c.attempt > attempt and partition in c.offsets and offset > c.offsets[partition]
                   for c in self.cutoffs)
