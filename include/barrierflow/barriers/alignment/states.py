"""The alignment states of one stage, one small class each (after Flink's BarrierHandlerState).

Every event method takes the shared :class:`~.channel_state.AlignmentContext` and returns the
next state; an event a state does not allow raises :class:`~.outcomes.AlignmentError`.

::

    WaitingForFirstBarrier ──first forward barrier n, aligned, more forward inputs──▶ CollectingBarriers(n)
        │  first barrier n, unaligned │ or its only forward input                       │
        │                             ▼                                                 │ last forward barrier n
        │                        (snapshot n) ──all inputs delivered n──▶ Waiting        │  (snapshot n, aligned)
        │                             │                                                 │ alignment timeout
        │                             └──inputs still to deliver n──▶ RecordingChannelState(n) ◀┘  (snapshot n,
        │                                                                │                       timed out)
        └────────────────────────────◀──every input delivered n (channel state complete)─┘

Events (all states):

* ``barrier_received`` — classified first: a barrier of an older attempt, or of a checkpoint
  at or before the last completed one or before the current one, is *older* (ignored,
  recorded); one newer than the current checkpoint is *newer* (the current checkpoint is
  aborted as SUBSUMED and the barrier starts the next); a barrier of a newer attempt than the
  stage's, or on a partition the stage does not read, raises.
* ``alignment_timeout`` — the aligned checkpoint in progress switches to unaligned (snapshot
  now; the partitions still owing their barrier become channel state). Elsewhere a no-op
  (the timer may fire just after the alignment finished).
* ``abort(n)`` — checkpoint ``n`` failed elsewhere: an alignment of ``n`` (or older) in progress
  ends (ABORTED) and every cap is released. Elsewhere a no-op.

Back-edge partitions never hold up the snapshot and are never capped: the snapshot is taken
once every *forward* partition delivered the barrier, and the records a back-edge carries
until its barrier arrives are recorded as channel state (back-edge logging).
"""

from __future__ import annotations

from barrierflow.barriers.alignment.channel_state import AlignmentContext
from barrierflow.barriers.alignment.outcomes import (
    AbortedAlignment,
    AbortReason,
    AlignmentError,
    AlignmentMode,
    ChannelStateRange,
    IgnoredBarrier,
)
from barrierflow.barriers.records import BarrierMarker
from barrierflow.spec.checkpoint_mode import CheckpointMode


class AlignmentState:
    """Base: classifies barriers (see the module docstring); subclasses handle the rest."""

    checkpoint_id: int | None = None

    def is_older(self, ctx: AlignmentContext, marker: BarrierMarker) -> bool:
        """Whether ``marker`` would be ignored as a barrier of an older checkpoint or attempt
        (the planner does not cut a partition at such a barrier)."""
        return (marker.attempt < ctx.attempt or marker.checkpoint_id <= ctx.last_completed
                or (self.checkpoint_id is not None and marker.checkpoint_id < self.checkpoint_id))

    def barrier_received(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                         now: float) -> AlignmentState:
        if partition not in ctx.partitions.all:
            raise AlignmentError(f"barrier {marker.checkpoint_id} arrived on {partition}, which is not an input "
                                 f"partition of this stage ({sorted(ctx.partitions.all)})")
        if marker.attempt > ctx.attempt:
            raise AlignmentError(
                f"barrier {marker.checkpoint_id} on {partition} at offset {offset} was written by attempt "
                f"{marker.attempt} (stage {marker.stage!r}), newer than this stage's attempt {ctx.attempt}: the "
                "pipeline was restored while this stage kept running; stop it and start it again")
        if marker.attempt < ctx.attempt:
            return self.older_barrier(ctx, partition, marker, offset, f"written by older attempt {marker.attempt}")
        if marker.checkpoint_id <= ctx.last_completed:
            return self.older_barrier(ctx, partition, marker, offset,
                                      f"checkpoint {marker.checkpoint_id} <= last completed {ctx.last_completed}")
        if self.checkpoint_id is not None and marker.checkpoint_id < self.checkpoint_id:
            return self.older_barrier(ctx, partition, marker, offset,
                                      f"checkpoint {marker.checkpoint_id} < current {self.checkpoint_id}")
        if self.checkpoint_id is not None and marker.checkpoint_id > self.checkpoint_id:
            return self.newer_barrier(ctx, partition, marker, offset, now)
        return self.on_barrier(ctx, partition, marker, offset, now)

    def older_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                      why: str) -> AlignmentState:
        """A barrier of an older checkpoint or attempt: recorded, otherwise nothing changes."""
        ctx.ignored.append(IgnoredBarrier(partition, marker, offset, why))
        return self

    def newer_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                      now: float) -> AlignmentState:
        """A barrier newer than the current checkpoint before it completed: abort the current
        one (SUBSUMED) and let the newer barrier start its own alignment."""
        assert self.checkpoint_id is not None
        ctx.abort(AbortedAlignment(self.checkpoint_id, ctx.attempt, AbortReason.SUBSUMED,
                                   f"barrier {marker.checkpoint_id} arrived on {partition} at offset {offset} "
                                   f"before every input partition delivered barrier {self.checkpoint_id}"))
        return WaitingForFirstBarrier().barrier_received(ctx, partition, marker, offset, now)

    def on_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                   now: float) -> AlignmentState:
        raise NotImplementedError

    def alignment_timeout(self, ctx: AlignmentContext, now: float) -> AlignmentState:
        return self

    def abort(self, ctx: AlignmentContext, checkpoint_id: int, now: float) -> AlignmentState:
        if self.checkpoint_id is None or checkpoint_id < self.checkpoint_id:
            return self
        ctx.abort(AbortedAlignment(self.checkpoint_id, ctx.attempt, AbortReason.ABORTED,
                                   f"checkpoint {checkpoint_id} was aborted while this stage was "
                                   f"{type(self).__name__}"))
        return WaitingForFirstBarrier()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.checkpoint_id if self.checkpoint_id is not None else ''})"


def _after_snapshot(ctx: AlignmentContext, checkpoint_id: int, attempt: int,
                    ranges: tuple[ChannelStateRange, ...] | None = None) -> AlignmentState:
    """Done when every input partition delivered the barrier, else record channel state.
    Right after the snapshot (``ranges`` None) the channel state starts with the ranges of
    partitions whose barrier was seen ahead of their cut."""
    if ranges is None:
        ranges = tuple(ctx.snapshot_ranges)
    if ctx.all_delivered():
        ctx.complete(list(ranges))
        return WaitingForFirstBarrier()
    return RecordingChannelState(checkpoint_id, attempt, ranges)


class WaitingForFirstBarrier(AlignmentState):
    """No checkpoint in progress; nothing is capped."""

    def on_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                   now: float) -> AlignmentState:
        cid = marker.checkpoint_id
        if partition in ctx.partitions.back_edges:
            raise AlignmentError(
                f"barrier {cid} arrived on back-edge partition {partition} at offset {offset} before any forward "
                "input delivered it; a back-edge only carries a barrier after this stage forwarded it")
        ctx.begin(now)
        ctx.deliver(partition, offset)
        if ctx.mode is CheckpointMode.UNALIGNED:
            ctx.take_snapshot(cid, marker.attempt, AlignmentMode.UNALIGNED, now, 0.0)
            return _after_snapshot(ctx, cid, marker.attempt)
        if ctx.forward_complete():
            ctx.take_snapshot(cid, marker.attempt, AlignmentMode.ALIGNED, now, 0.0)
            return _after_snapshot(ctx, cid, marker.attempt)
        ctx.cap(partition, offset)
        return CollectingBarriers(cid, marker.attempt)


class CollectingBarriers(AlignmentState):
    """Aligned checkpoint ``checkpoint_id`` in progress: each forward partition that
    delivered the barrier is capped just after it until the others deliver theirs."""

    def __init__(self, checkpoint_id: int, attempt: int) -> None:
        self.checkpoint_id = checkpoint_id
        self.attempt = attempt

    def on_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                   now: float) -> AlignmentState:
        if partition in ctx.delivered:
            raise AlignmentError(f"barrier {marker.checkpoint_id} arrived twice on {partition} (offsets "
                                 f"{ctx.delivered[partition]} and {offset})")
        if partition in ctx.partitions.back_edges:
            raise AlignmentError(
                f"barrier {marker.checkpoint_id} arrived on back-edge partition {partition} before this stage "
                "took its snapshot; a back-edge only carries a barrier after this stage forwarded it")
        ctx.deliver(partition, offset)
        ctx.cap(partition, offset)
        if not ctx.forward_complete():
            return self
        ctx.take_snapshot(self.checkpoint_id, self.attempt, AlignmentMode.ALIGNED, now, ctx.elapsed_ms(now))
        return _after_snapshot(ctx, self.checkpoint_id, self.attempt)

    def alignment_timeout(self, ctx: AlignmentContext, now: float) -> AlignmentState:
        """Switch this checkpoint to unaligned: snapshot now; the forward partitions still
        owing their barrier become channel state."""
        ctx.take_snapshot(self.checkpoint_id, self.attempt, AlignmentMode.ALIGNED_TIMED_OUT, now,
                          ctx.elapsed_ms(now))
        return _after_snapshot(ctx, self.checkpoint_id, self.attempt)


class RecordingChannelState(AlignmentState):
    """Snapshot of ``checkpoint_id`` taken; nothing is capped. Each partition still owing the
    barrier contributes the range from its snapshot cut to its barrier as channel state."""

    def __init__(self, checkpoint_id: int, attempt: int, ranges: tuple[ChannelStateRange, ...] = ()) -> None:
        self.checkpoint_id = checkpoint_id
        self.attempt = attempt
        self.ranges = ranges

    def on_barrier(self, ctx: AlignmentContext, partition: str, marker: BarrierMarker, offset: int,
                   now: float) -> AlignmentState:
        if partition in ctx.delivered:
            raise AlignmentError(f"barrier {marker.checkpoint_id} arrived twice on {partition} (offsets "
                                 f"{ctx.delivered[partition]} and {offset})")
        assert ctx.snapshot is not None
        cut = ctx.snapshot.offsets[partition]
        if offset < cut - 1:
            raise AlignmentError(
                f"partition {partition} delivered barrier {marker.checkpoint_id} at offset {offset}, but the "
                f"snapshot already cut it at {cut}: a batch was planned across the barrier")
        ranges = self.ranges
        if offset > cut:  # records between the cut and the barrier
            ranges = (*ranges, ctx.channel_range(partition, offset))
        ctx.deliver(partition, offset)
        return _after_snapshot(ctx, self.checkpoint_id, self.attempt, ranges)
