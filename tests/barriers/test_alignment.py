"""The alignment state machine, driven through every transition (pure, no Spark, no Kafka).

Inputs in these tests: forward partitions ``a:0``, ``b:0`` (and ``b:1``), back-edge ``fb:0``.
Offsets are Kafka offsets; a barrier record at offset ``o`` cuts its partition at ``o + 1``.
"""

from __future__ import annotations

import pytest
from barrierflow.barriers.alignment import (
    AbortReason,
    AlignmentContext,
    AlignmentError,
    AlignmentMode,
    BarrierAligner,
    ChannelStateRange,
    CollectingBarriers,
    InputPartitions,
    RecordingChannelState,
    WaitingForFirstBarrier,
)
from barrierflow.barriers.records import BarrierMarker
from barrierflow.spec.models import CheckpointMode

ALIGNED, UNALIGNED = CheckpointMode.ALIGNED, CheckpointMode.UNALIGNED


def barrier(n: int, attempt: int = 0) -> BarrierMarker:
    return BarrierMarker(n, attempt, "up")


def aligner(forward: tuple[str, ...] = ("a:0", "b:0"), back_edges: tuple[str, ...] = (),
            mode: CheckpointMode = ALIGNED, timeout: float = 0.0, attempt: int = 0,
            last_completed: int = 0) -> BarrierAligner:
    # Every second offset holds a data record (the others: transaction markers), so counts
    # differ from offset spans and a test sees that the counter is used.
    ctx = AlignmentContext(InputPartitions(frozenset(forward), frozenset(back_edges)), mode=mode,
                           alignment_timeout=timeout, attempt=attempt, last_completed=last_completed,
                           count_records=lambda _p, start, end: len(range(start + start % 2, end, 2)))
    return BarrierAligner(ctx)


# --------------------------------------------------------------------------- WaitingForFirstBarrier


def test_first_barrier_aligned_caps_its_partition_and_collects() -> None:
    al = aligner()
    al.observe({"a:0": 11, "b:0": 5})
    al.barrier_received("a:0", barrier(1), 10, now=100.0)
    assert isinstance(al.state, CollectingBarriers) and al.state.checkpoint_id == 1
    assert al.caps == {"a:0": 11}
    assert al.drain().snapshots == ()


def test_first_barrier_on_the_only_forward_input_snapshots_and_completes() -> None:
    al = aligner(forward=("a:0",))
    al.observe({"a:0": 4})
    al.barrier_received("a:0", barrier(1), 3, now=1.0)
    assert isinstance(al.state, WaitingForFirstBarrier)
    out = al.drain()
    (snap,) = out.snapshots
    assert (snap.checkpoint_id, snap.mode, snap.offsets, snap.alignment_ms) == (1, AlignmentMode.ALIGNED,
                                                                             {"a:0": 4}, 0.0)
    (done,) = out.completed
    assert done.barrier_offsets == {"a:0": 3} and done.channel_state == ()
    assert al.context.last_completed == 1


def test_first_barrier_unaligned_snapshots_at_once_and_records_the_rest() -> None:
    al = aligner(mode=UNALIGNED)
    al.observe({"a:0": 11, "b:0": 6})
    al.barrier_received("a:0", barrier(1), 10, now=100.0)
    assert isinstance(al.state, RecordingChannelState) and al.caps == {}
    (snap,) = al.drain().snapshots
    assert snap.mode is AlignmentMode.UNALIGNED and snap.alignment_ms == 0.0
    assert snap.offsets == {"a:0": 11, "b:0": 6}  # b:0 is cut where its batch ends, before its barrier


def test_first_barrier_on_a_back_edge_is_illegal() -> None:
    al = aligner(back_edges=("fb:0",))
    al.observe({"a:0": 0, "b:0": 0, "fb:0": 3})
    with pytest.raises(AlignmentError, match="back-edge partition fb:0"):
        al.barrier_received("fb:0", barrier(1), 2, now=0.0)


def test_barrier_of_a_completed_checkpoint_or_older_attempt_is_ignored() -> None:
    al = aligner(attempt=2, last_completed=4)
    al.observe({"a:0": 10, "b:0": 10})
    al.barrier_received("a:0", barrier(4, attempt=2), 3, now=0.0)
    al.barrier_received("b:0", barrier(9, attempt=1), 5, now=0.0)
    assert isinstance(al.state, WaitingForFirstBarrier) and al.caps == {}
    ignored = al.drain().ignored
    assert [(i.partition, i.marker.checkpoint_id) for i in ignored] == [("a:0", 4), ("b:0", 9)]
    assert "last completed 4" in ignored[0].why and "older attempt 1" in ignored[1].why


def test_barrier_of_a_newer_attempt_or_an_unknown_partition_raises() -> None:
    al = aligner(attempt=1)
    with pytest.raises(AlignmentError, match="newer than this stage's attempt 1"):
        al.barrier_received("a:0", barrier(1, attempt=2), 0, now=0.0)
    with pytest.raises(AlignmentError, match="zz:0, which is not an input partition"):
        al.barrier_received("zz:0", barrier(1, attempt=1), 0, now=0.0)


def test_timeout_and_abort_while_waiting_change_nothing() -> None:
    al = aligner(timeout=1.0)
    al.alignment_timeout(now=5.0)
    al.abort(3, now=5.0)
    assert isinstance(al.state, WaitingForFirstBarrier)
    assert al.drain().aborted == ()


# --------------------------------------------------------------------------- CollectingBarriers


def test_collecting_more_barriers_keeps_capping_until_the_last() -> None:
    al = aligner(forward=("a:0", "b:0", "b:1"))
    al.observe({"a:0": 11, "b:0": 3, "b:1": 3})
    al.barrier_received("a:0", barrier(1), 10, now=100.0)
    al.observe({"b:0": 8, "b:1": 6})
    al.barrier_received("b:0", barrier(1), 7, now=100.5)
    assert isinstance(al.state, CollectingBarriers)
    assert al.caps == {"a:0": 11, "b:0": 8}


def test_last_forward_barrier_completes_the_aligned_snapshot() -> None:
    al = aligner()
    al.observe({"a:0": 11, "b:0": 3})
    al.barrier_received("a:0", barrier(1), 10, now=100.0)
    al.observe({"b:0": 21})
    al.barrier_received("b:0", barrier(1), 20, now=102.25)
    assert isinstance(al.state, WaitingForFirstBarrier) and al.caps == {}
    out = al.drain()
    (snap,) = out.snapshots
    assert snap.mode is AlignmentMode.ALIGNED
    assert snap.alignment_ms == 2250.0  # first to last barrier
    assert snap.offsets == {"a:0": 11, "b:0": 21}  # everyone just past its barrier
    (done,) = out.completed
    assert done.barrier_offsets == {"a:0": 10, "b:0": 20} and done.channel_state == ()


def test_duplicate_or_back_edge_barrier_while_collecting_raises() -> None:
    al = aligner(forward=("a:0", "b:0"), back_edges=("fb:0",))
    al.observe({"a:0": 11, "b:0": 3, "fb:0": 0})
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    with pytest.raises(AlignmentError, match="twice on a:0"):
        al.barrier_received("a:0", barrier(1), 12, now=0.0)
    with pytest.raises(AlignmentError, match="before this stage took its snapshot"):
        al.barrier_received("fb:0", barrier(1), 0, now=0.0)


def test_alignment_timeout_switches_to_unaligned() -> None:
    al = aligner(forward=("a:0", "b:0", "b:1"), timeout=1.0)
    al.observe({"a:0": 11, "b:0": 2, "b:1": 4})
    al.barrier_received("a:0", barrier(1), 10, now=100.0)
    al.tick(now=100.9)
    assert isinstance(al.state, CollectingBarriers)  # not due yet
    al.observe({"b:0": 5, "b:1": 9})
    al.tick(now=101.0)
    assert isinstance(al.state, RecordingChannelState) and al.caps == {}
    (snap,) = al.drain().snapshots
    assert snap.mode is AlignmentMode.ALIGNED_TIMED_OUT and snap.alignment_ms == 1000.0  # first barrier to switch
    assert snap.offsets == {"a:0": 11, "b:0": 5, "b:1": 9}
    al.barrier_received("b:0", barrier(1), 30, now=103.0)
    al.barrier_received("b:1", barrier(1), 9, now=104.0)  # its barrier was the next record: no channel state
    (done,) = al.drain().completed
    assert done.mode is AlignmentMode.ALIGNED_TIMED_OUT
    assert done.channel_state == (ChannelStateRange("b:0", 5, 30, 12),)
    assert done.channel_state_records == 12


def test_newer_barrier_while_collecting_subsumes_the_current_checkpoint() -> None:
    al = aligner(forward=("a:0", "b:0", "b:1"))
    al.observe({"a:0": 11, "b:0": 3, "b:1": 3})
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    al.barrier_received("b:0", barrier(2), 2, now=1.0)
    assert isinstance(al.state, CollectingBarriers) and al.state.checkpoint_id == 2
    assert al.caps == {"b:0": 3}  # checkpoint 1's cap on a:0 is released
    (aborted,) = al.drain().aborted
    assert (aborted.checkpoint_id, aborted.reason) == (1, AbortReason.SUBSUMED)
    # the late barrier 1 on b:1 is now older than the current checkpoint: ignored
    al.barrier_received("b:1", barrier(1), 1, now=2.0)
    assert isinstance(al.state, CollectingBarriers) and al.state.checkpoint_id == 2
    assert [i.marker.checkpoint_id for i in al.drain().ignored] == [1]


def test_abort_while_collecting_releases_the_caps() -> None:
    al = aligner()
    al.observe({"a:0": 11, "b:0": 3})
    al.barrier_received("a:0", barrier(3), 10, now=0.0)
    al.abort(2, now=0.5)  # an older checkpoint: nothing to do
    assert isinstance(al.state, CollectingBarriers)
    al.abort(3, now=1.0)
    assert isinstance(al.state, WaitingForFirstBarrier) and al.caps == {}
    (aborted,) = al.drain().aborted
    assert (aborted.checkpoint_id, aborted.reason) == (3, AbortReason.ABORTED)
    assert "was aborted while this stage was CollectingBarriers" in aborted.message


# --------------------------------------------------------------------------- RecordingChannelState


def _unaligned_after_first(**kwargs: object) -> BarrierAligner:
    al = aligner(mode=UNALIGNED, forward=("a:0", "b:0", "b:1"), **kwargs)  # type: ignore[arg-type]
    al.observe({"a:0": 11, "b:0": 4, "b:1": 6})
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    al.drain()
    return al


def test_recording_collects_a_range_per_late_partition_and_completes() -> None:
    al = _unaligned_after_first()
    al.barrier_received("b:0", barrier(1), 14, now=1.0)
    assert isinstance(al.state, RecordingChannelState)
    al.barrier_received("b:1", barrier(1), 7, now=2.0)
    assert isinstance(al.state, WaitingForFirstBarrier)
    (done,) = al.drain().completed
    assert done.mode is AlignmentMode.UNALIGNED and done.alignment_ms == 0.0
    assert done.snapshot.offsets == {"a:0": 11, "b:0": 4, "b:1": 6}
    assert done.barrier_offsets == {"a:0": 10, "b:0": 14, "b:1": 7}
    assert done.channel_state == (ChannelStateRange("b:0", 4, 14, 5), ChannelStateRange("b:1", 6, 7, 1))


def test_barrier_inside_the_snapshot_batch_adds_no_range() -> None:
    al = aligner(mode=UNALIGNED)
    al.observe({"a:0": 11, "b:0": 6})  # b:0's batch ends just past its barrier at 5
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    al.barrier_received("b:0", barrier(1), 5, now=0.0)
    (done,) = al.drain().completed
    assert done.channel_state == ()


def test_barrier_behind_the_cut_means_a_batch_crossed_it() -> None:
    al = aligner(mode=UNALIGNED)
    al.observe({"a:0": 11, "b:0": 9})
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    with pytest.raises(AlignmentError, match="planned across the barrier"):
        al.barrier_received("b:0", barrier(1), 5, now=0.0)


def test_duplicate_barrier_while_recording_raises() -> None:
    al = _unaligned_after_first()
    with pytest.raises(AlignmentError, match="twice on a:0"):
        al.barrier_received("a:0", barrier(1), 12, now=0.0)


def test_newer_barrier_while_recording_subsumes_the_incomplete_checkpoint() -> None:
    al = _unaligned_after_first()
    al.observe({"a:0": 31})
    al.barrier_received("a:0", barrier(2), 30, now=1.0)
    assert isinstance(al.state, RecordingChannelState) and al.state.checkpoint_id == 2
    out = al.drain()
    assert [(a.checkpoint_id, a.reason) for a in out.aborted] == [(1, AbortReason.SUBSUMED)]
    assert [s.checkpoint_id for s in out.snapshots] == [2] and out.completed == ()


def test_timeout_while_recording_is_a_no_op_and_abort_ends_it() -> None:
    al = _unaligned_after_first()
    al.alignment_timeout(now=99.0)
    assert isinstance(al.state, RecordingChannelState)
    al.barrier_received("b:0", barrier(0 + 1, attempt=0), 8, now=1.0)
    al.abort(1, now=2.0)
    assert isinstance(al.state, WaitingForFirstBarrier)
    out = al.drain()
    assert out.completed == () and [a.reason for a in out.aborted] == [AbortReason.ABORTED]


def test_older_barrier_while_recording_is_ignored() -> None:
    al = aligner(mode=UNALIGNED, last_completed=3)
    al.observe({"a:0": 11, "b:0": 4})
    al.barrier_received("a:0", barrier(4), 10, now=0.0)
    al.barrier_received("b:0", barrier(3), 2, now=0.0)
    assert isinstance(al.state, RecordingChannelState)
    assert len(al.drain().ignored) == 1


# --------------------------------------------------------------------------- back-edges


def test_back_edge_is_never_waited_on_and_its_records_are_logged() -> None:
    al = aligner(forward=("a:0",), back_edges=("fb:0",))
    al.observe({"a:0": 6, "fb:0": 20})
    al.barrier_received("a:0", barrier(1), 5, now=0.0)  # the only forward input: snapshot at once
    assert isinstance(al.state, RecordingChannelState) and al.caps == {}  # fb:0 is not capped
    (snap,) = al.drain().snapshots
    assert snap.mode is AlignmentMode.ALIGNED and snap.offsets == {"a:0": 6, "fb:0": 20}
    al.barrier_received("fb:0", barrier(1), 27, now=3.0)  # the barrier came around the cycle
    (done,) = al.drain().completed
    assert done.channel_state == (ChannelStateRange("fb:0", 20, 27, 4, back_edge=True),)


def test_aligned_snapshot_waits_only_for_forward_inputs() -> None:
    al = aligner(forward=("a:0", "b:0"), back_edges=("fb:0",))
    al.observe({"a:0": 3, "b:0": 3, "fb:0": 2})
    al.barrier_received("a:0", barrier(1), 2, now=0.0)
    assert "fb:0" not in al.caps
    al.observe({"fb:0": 7})
    al.barrier_received("b:0", barrier(1), 2, now=0.5)
    (snap,) = al.drain().snapshots
    assert snap.offsets == {"a:0": 3, "b:0": 3, "fb:0": 7} and snap.alignment_ms == 500.0
    assert isinstance(al.state, RecordingChannelState)


def test_snapshot_needs_every_partition_observed() -> None:
    al = aligner(mode=UNALIGNED)
    al.observe({"a:0": 11})
    with pytest.raises(AlignmentError, match=r"no position observed for input partitions \['b:0'\]"):
        al.barrier_received("a:0", barrier(1), 10, now=0.0)


def test_input_partitions_must_be_disjoint_and_have_a_forward_input() -> None:
    with pytest.raises(ValueError, match="both forward and back-edge"):
        InputPartitions(frozenset({"a:0"}), frozenset({"a:0"}))
    with pytest.raises(ValueError, match="at least one forward"):
        InputPartitions(frozenset(), frozenset({"fb:0"}))


def test_unaligned_barrier_seen_ahead_overtakes_the_records_before_it() -> None:
    """A barrier found ahead of where its partition is processed (the planner reads ahead in
    the log) cuts that partition where it stands; the records up to the barrier are channel
    state, as for the partitions that deliver later."""
    al = aligner(mode=UNALIGNED)
    al.observe({"a:0": 5, "b:0": 3})
    al.barrier_received("a:0", barrier(1), 10, now=0.0)
    (snap,) = al.drain().snapshots
    assert snap.offsets == {"a:0": 5, "b:0": 3}
    al.barrier_received("b:0", barrier(1), 8, now=0.1)
    (done,) = al.drain().completed
    assert done.channel_state == (ChannelStateRange("a:0", 5, 10, 2), ChannelStateRange("b:0", 3, 8, 2))
