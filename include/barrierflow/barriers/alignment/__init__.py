"""Barrier alignment across a stage's input partitions (pipelines of several stages).

* :mod:`.states` — the state machine, one small class per state;
* :mod:`.channel_state` — the bookkeeping the states share (input partitions, caps, cuts);
* :mod:`.outcomes` — what it decides: snapshot now, completed (mode, alignment time, channel
  state as offset ranges), aborted, ignored;
* :mod:`.aligner` — the object the batch planner feeds each round.
"""

from barrierflow.barriers.alignment.aligner import AlignmentOutbox, BarrierAligner
from barrierflow.barriers.alignment.channel_state import AlignmentContext, InputPartitions
from barrierflow.barriers.alignment.outcomes import (
    AbortedAlignment,
    AbortReason,
    AlignmentError,
    AlignmentMode,
    ChannelStateRange,
    CompletedAlignment,
    IgnoredBarrier,
    SnapshotDecision,
)
from barrierflow.barriers.alignment.states import (
    AlignmentState,
    CollectingBarriers,
    RecordingChannelState,
    WaitingForFirstBarrier,
)

__all__ = [
    "AbortReason",
    "AbortedAlignment",
    "AlignmentContext",
    "AlignmentError",
    "AlignmentMode",
    "AlignmentOutbox",
    "AlignmentState",
    "BarrierAligner",
    "ChannelStateRange",
    "CollectingBarriers",
    "CompletedAlignment",
    "IgnoredBarrier",
    "InputPartitions",
    "RecordingChannelState",
    "SnapshotDecision",
    "WaitingForFirstBarrier",
]
