"""What the alignment state machine decides, as small immutable records.

* :class:`SnapshotDecision` — take the stage's snapshot of checkpoint ``n`` now: the batch
  planned in this round ends at ``offsets`` and is the stage's barrier batch.
* :class:`CompletedAlignment` — every input partition delivered barrier ``n``; carries the
  mode, the alignment time and the channel state (offset ranges with record counts) that go
  into the stage's manifest.
* :class:`AbortedAlignment` — checkpoint ``n`` ends here without a complete snapshot.
* :class:`IgnoredBarrier` — a barrier of an older checkpoint or attempt (after a restore,
  barriers at or before the restored one come by again); nothing changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from barrierflow.barriers.records import BarrierMarker
from barrierflow.errors import BarrierflowError


class AlignmentError(BarrierflowError):
    """An event that the current alignment state does not allow (a protocol violation, e.g.
    the same barrier twice on one partition); the stage stops rather than guess."""


class AlignmentMode(enum.StrEnum):
    """How a checkpoint's snapshot was cut."""

    #: every forward partition was capped at its barrier until all had delivered it
    ALIGNED = "aligned"
    #: the snapshot was taken at the first barrier; the rest is channel state
    UNALIGNED = "unaligned"
    #: aligned until ``alignment_timeout`` passed, then switched to unaligned
    ALIGNED_TIMED_OUT = "aligned-timed-out"


class AbortReason(enum.StrEnum):
    """Why an alignment ended without a complete snapshot; each carries its explanation."""

    SUBSUMED = "SUBSUMED"
    ABORTED = "ABORTED"

    @property
    def explanation(self) -> str:
        return {
            "SUBSUMED": "a newer barrier arrived before every input partition delivered this one",
            "ABORTED": "the checkpoint was aborted (it failed or expired elsewhere in the pipeline)",
        }[self.value]


@dataclass(frozen=True)
class SnapshotDecision:
    checkpoint_id: int
    attempt: int
    mode: AlignmentMode
    offsets: dict[str, int]
    alignment_ms: float


@dataclass(frozen=True)
class ChannelStateRange:
    """Records of ``partition`` in ``[start, end)`` belong to the checkpoint as channel state:
    they arrived after the snapshot cut the partition and before its barrier. ``records``
    counts data records only (``end - start`` may be larger: barriers, transaction markers)."""

    partition: str
    start: int
    end: int
    records: int
    back_edge: bool = False


@dataclass(frozen=True)
class CompletedAlignment:
    snapshot: SnapshotDecision
    barrier_offsets: dict[str, int]
    channel_state: tuple[ChannelStateRange, ...]

    @property
    def checkpoint_id(self) -> int:
        return self.snapshot.checkpoint_id

    @property
    def mode(self) -> AlignmentMode:
        return self.snapshot.mode

    @property
    def alignment_ms(self) -> float:
        return self.snapshot.alignment_ms

    @property
    def channel_state_records(self) -> int:
        return sum(r.records for r in self.channel_state)


@dataclass(frozen=True)
class AbortedAlignment:
    checkpoint_id: int
    attempt: int
    reason: AbortReason
    message: str


@dataclass(frozen=True)
class IgnoredBarrier:
    partition: str
    marker: BarrierMarker
    offset: int
    why: str
