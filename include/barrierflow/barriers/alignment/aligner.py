"""The front of the alignment state machine: one object per stage that the batch planner feeds.

Protocol per planning round (the source's ``latestOffset``):

1. :meth:`BarrierAligner.observe` where each input partition's next batch would end, never
   past its first barrier record not yet delivered (+1, so the range includes the barrier
   record, which ``read`` never emits);
2. :meth:`BarrierAligner.barrier_received` for each barrier record found in the round, per
   partition in offset order;
3. :meth:`BarrierAligner.tick` — fires the alignment timeout when it is due;
4. apply :attr:`BarrierAligner.caps` (a capped partition does not advance past its cap) and,
   when :meth:`BarrierAligner.drain` returns a :class:`~.outcomes.SnapshotDecision`, end the
   batch exactly at its offsets and mark it as the barrier batch of its checkpoint.

Completed alignments (for the stage's manifest: mode, alignment time, channel state) and
aborted ones come out of :meth:`BarrierAligner.drain` too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from barrierflow.barriers.alignment.channel_state import AlignmentContext
from barrierflow.barriers.alignment.outcomes import (
    AbortedAlignment,
    CompletedAlignment,
    IgnoredBarrier,
    SnapshotDecision,
)
from barrierflow.barriers.alignment.states import AlignmentState, CollectingBarriers, WaitingForFirstBarrier
from barrierflow.barriers.records import BarrierMarker
from barrierflow.spec.checkpoint_mode import CheckpointMode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlignmentOutbox:
    """What the state machine decided since the last :meth:`BarrierAligner.drain`."""

    snapshots: tuple[SnapshotDecision, ...]
    completed: tuple[CompletedAlignment, ...]
    aborted: tuple[AbortedAlignment, ...]
    ignored: tuple[IgnoredBarrier, ...]


class BarrierAligner:
    """Holds the current :class:`~.states.AlignmentState` and the shared context."""

    def __init__(self, context: AlignmentContext) -> None:
        self.context = context
        self.state: AlignmentState = WaitingForFirstBarrier()

    @property
    def caps(self) -> dict[str, int]:
        """Partition -> offset it may not pass this round (aligned checkpoints only)."""
        return dict(self.context.caps)

    def is_older(self, marker: BarrierMarker) -> bool:
        """Whether ``marker`` is a barrier of an older checkpoint or attempt (ignored)."""
        return self.state.is_older(self.context, marker)

    @property
    def checkpoint_in_progress(self) -> int | None:
        return self.state.checkpoint_id

    def observe(self, positions: Mapping[str, int]) -> None:
        self.context.observe(positions)

    def barrier_received(self, partition: str, marker: BarrierMarker, offset: int, now: float) -> None:
        before = self.state
        self.state = self.state.barrier_received(self.context, partition, marker, offset, now)
        log.debug("barrier %s on %s at %d: %r -> %r", marker, partition, offset, before, self.state)

    def alignment_timeout_due(self, now: float) -> bool:
        ctx = self.context
        return (ctx.mode is CheckpointMode.ALIGNED and ctx.alignment_timeout > 0
                and isinstance(self.state, CollectingBarriers) and ctx.first_barrier_at is not None
                and now - ctx.first_barrier_at >= ctx.alignment_timeout)

    def tick(self, now: float) -> None:
        """Fire the alignment timeout if it is due (aligned mode with a timeout only)."""
        if self.alignment_timeout_due(now):
            log.info("checkpoint %s: alignment timeout passed, switching to unaligned", self.state.checkpoint_id)
            self.state = self.state.alignment_timeout(self.context, now)

    def alignment_timeout(self, now: float) -> None:
        self.state = self.state.alignment_timeout(self.context, now)

    def barriers_overdue(self, barriers: list[tuple[str, BarrierMarker, int]], now: float, since: float) -> None:
        """Aligned with a timeout, when a checkpoint started (was triggered, or first seen when
        its barriers do not say) at least ``alignment_timeout`` ago: feed this round's
        ``barriers`` (``(partition, marker, offset)``, those beyond the next batch included)
        and switch the checkpoint to unaligned now if it is still collecting. Its alignment
        time counts from ``since``, when this stage first saw one of its barriers."""
        ctx = self.context
        ctx.overdue_since = since
        try:
            if isinstance(self.state, CollectingBarriers) and ctx.first_barrier_at is not None:
                # collecting since a barrier was received; it was seen (ahead) before that
                ctx.first_barrier_at = min(ctx.first_barrier_at, since)
            for partition, marker, offset in barriers:
                self.barrier_received(partition, marker, offset, now)
            if isinstance(self.state, CollectingBarriers):
                self.state = self.state.alignment_timeout(ctx, now)
        finally:
            ctx.overdue_since = None

    def abort(self, checkpoint_id: int, now: float) -> None:
        self.state = self.state.abort(self.context, checkpoint_id, now)

    def drain(self) -> AlignmentOutbox:
        ctx = self.context
        out = AlignmentOutbox(tuple(ctx.snapshots), tuple(ctx.completed), tuple(ctx.aborted), tuple(ctx.ignored))
        ctx.snapshots.clear()
        ctx.completed.clear()
        ctx.aborted.clear()
        ctx.ignored.clear()
        return out
