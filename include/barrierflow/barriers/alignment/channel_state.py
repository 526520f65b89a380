"""The mutable bookkeeping the alignment states share: which input partitions exist, which
delivered the current barrier, which are capped, where each stands, and what came out.

A stage's *input partitions* are the partitions of the channels it reads (``"topic:p"``),
split into forward partitions (alignment waits for their barriers) and back-edge partitions
(channels that close a cycle: alignment never waits for them). The states in
:mod:`.states` decide; this object only remembers, so every state stays a small class.

The batch planner tells it, before feeding a round's barriers, where each partition's next
batch would end (:meth:`AlignmentContext.observe`); a snapshot taken in that round cuts every
partition that has not delivered the barrier at that position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from barrierflow.barriers.alignment.outcomes import (
    AbortedAlignment,
    AlignmentError,
    AlignmentMode,
    ChannelStateRange,
    CompletedAlignment,
    IgnoredBarrier,
    SnapshotDecision,
)

#: ``count(partition, start, end)`` -> data records (barriers and other attempts' records
#: excluded) in ``[start, end)``; the source counts them while it reads the range.
RecordCounter = Callable[[str, int, int], int]


@dataclass(frozen=True)
class InputPartitions:
    """The input partitions of one stage."""

    forward: frozenset[str]
    back_edges: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        both = self.forward & self.back_edges
        if both:
            raise ValueError(f"partitions {sorted(both)} are both forward and back-edge inputs")
        if not self.forward:
            raise ValueError("a stage needs at least one forward input partition (back-edges never start "
                             "a checkpoint)")

    @property
    def all(self) -> frozenset[str]:
        return self.forward | self.back_edges


@dataclass
class AlignmentContext:
    """Shared bookkeeping of one stage's alignment; see the module docstring.

    ``attempt``: the stage's pipeline attempt; ``last_completed``: the newest checkpoint this
    stage finished (its restored checkpoint after a restore). Barriers at or below it, or of
    an older attempt, are ignored.
    """

    partitions: InputPartitions
    mode: AlignmentMode = AlignmentMode.ALIGNED
    alignment_timeout: float = 0.0
    attempt: int = 0
    last_completed: int = 0
    count_records: RecordCounter = lambda _p, start, end: max(0, end - start)
    positions: dict[str, int] = field(default_factory=dict)
    #: checkpoint in progress: partition -> offset of its barrier record
    delivered: dict[str, int] = field(default_factory=dict)
    #: aligned: partition -> offset it may not pass (just after its barrier record)
    caps: dict[str, int] = field(default_factory=dict)
    first_barrier_at: float | None = None
    #: set while barriers of a checkpoint past its alignment timeout are fed: when its first
    #: barrier was seen (ahead of the batch), where its alignment time starts
    overdue_since: float | None = None
    snapshot: SnapshotDecision | None = None
    #: channel state of partitions whose barrier was seen ahead of their cut at the snapshot
    snapshot_ranges: list[ChannelStateRange] = field(default_factory=list)
    # outbox, drained by the planner after each round
    snapshots: list[SnapshotDecision] = field(default_factory=list)
    completed: list[CompletedAlignment] = field(default_factory=list)
    aborted: list[AbortedAlignment] = field(default_factory=list)
    ignored: list[IgnoredBarrier] = field(default_factory=list)

    def observe(self, positions: Mapping[str, int]) -> None:
        """Where each partition's next batch would end this round (before capping)."""
        self.positions.update(positions)

    # -- what the states do with it --------------------------------------------------------
    def begin(self, now: float) -> None:
        self.delivered.clear()
        self.caps.clear()
        self.snapshot = None
        self.first_barrier_at = now if self.overdue_since is None else min(now, self.overdue_since)

    def deliver(self, partition: str, offset: int) -> None:
        self.delivered[partition] = offset

    def cap(self, partition: str, offset: int) -> None:
        self.caps[partition] = offset + 1

    def forward_complete(self) -> bool:
        return self.partitions.forward <= set(self.delivered)

    def all_delivered(self) -> bool:
        return self.partitions.all <= set(self.delivered)

    def elapsed_ms(self, now: float) -> float:
        return 0.0 if self.first_barrier_at is None else max(0.0, (now - self.first_barrier_at) * 1000.0)

    def take_snapshot(self, checkpoint_id: int, attempt: int, mode: AlignmentMode, now: float,
                      alignment_ms: float) -> SnapshotDecision:
        """Cut every input partition: just after its barrier where it delivered one, else at
        its observed position; the batch that ends there is the stage's barrier batch."""
        unobserved = sorted(p for p in self.partitions.all - set(self.delivered) if p not in self.positions)
        if unobserved:
            raise AlignmentError(f"snapshot of checkpoint {checkpoint_id}: no position observed for input partitions "
                                 f"{unobserved}; the planner observes every partition before feeding barriers")
        # A partition that delivered its barrier is cut just after it, or where it stands when
        # the barrier was seen ahead of the partition's position (unaligned: the barrier
        # overtakes the records before it, which become channel state).
        offsets = {p: (min(self.delivered[p] + 1, self.positions.get(p, self.delivered[p] + 1))
                       if p in self.delivered else self.positions[p])
                   for p in sorted(self.partitions.all)}
        if mode is AlignmentMode.ALIGNED and any(offsets[p] <= b for p, b in self.delivered.items()):
            # an aligned checkpoint never cuts before a delivered barrier unless it was
            # delivered ahead of the batch: past its alignment timeout
            mode = AlignmentMode.ALIGNED_TIMED_OUT
        decision = SnapshotDecision(checkpoint_id, attempt, mode, offsets, round(alignment_ms, 3))
        self.snapshot = decision
        self.snapshots.append(decision)
        self.caps.clear()
        self.snapshot_ranges = [self.channel_range(p, b) for p, b in sorted(self.delivered.items()) if b > offsets[p]]
        return decision

    def channel_range(self, partition: str, barrier_offset: int) -> ChannelStateRange:
        assert self.snapshot is not None
        start = self.snapshot.offsets[partition]
        return ChannelStateRange(partition, start, barrier_offset,
                                 self.count_records(partition, start, barrier_offset) if barrier_offset > start else 0,
                                 partition in self.partitions.back_edges)

    def complete(self, ranges: list[ChannelStateRange]) -> CompletedAlignment:
        assert self.snapshot is not None
        done = CompletedAlignment(self.snapshot, dict(sorted(self.delivered.items())),
                                  tuple(sorted(ranges, key=lambda r: r.partition)))
        self.completed.append(done)
        self.last_completed = max(self.last_completed, self.snapshot.checkpoint_id)
        self._reset()
        return done

    def abort(self, aborted: AbortedAlignment) -> None:
        self.aborted.append(aborted)
        self._reset()

    def _reset(self) -> None:
        self.delivered.clear()
        self.caps.clear()
        self.snapshot = None
        self.snapshot_ranges = []
        self.first_barrier_at = None
