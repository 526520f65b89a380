"""The one progress type of a run, in every shape: the run's figures and each stage's.

The run loop hands the progress display a :class:`Progress` every ``progress_every`` seconds
(:meth:`~barrierflow.runtime.pipeline_runner.CutKeeper.progress`). Its first fields are the
run's as a whole: the newest batch and the records of the stages that read a source, the epoch
the source stages are in (the cut their next barrier completes), the newest completed cut, the
uploads in flight and the cuts that failed, and event time (late rows, paused and idle
partitions, watermark skew) when the stage tracks it. :attr:`Progress.stages` has each stage's
part (:class:`StageProgress`): its last batch, the rate Spark reported for it, its epoch, and
the records it read and batches it committed in this run.
"""

from __future__ import annotations

from dataclasses import dataclass

from barrierflow.runtime.event_time import EventTimeStatus

__all__ = ["Progress", "StageProgress"]


@dataclass(frozen=True)
class StageProgress:
    """One stage's part of the progress display: its last batch, the rate Spark reported for
    it (records/s processed), and the epoch it is in (the checkpoint its next barrier completes);
    with the records it read and the batches it committed in this run (what the metrics feed
    counts)."""

    stage: str
    batch_id: int | None
    records_per_second: float
    epoch: int
    records: int = 0
    batches: int = 0
    #: keys the stage's keyed functions started and expired in this run (None: it has none;
    #: :mod:`barrierflow.keyed_state.figures`)
    keys_started: int | None = None
    keys_expired: int | None = None
    keys_live: int | None = None


@dataclass(frozen=True)
class Progress:
    """What the one progress display of a run shows (module docstring)."""

    batch_id: int | None
    records: int
    records_per_second: float
    epoch: int
    last_completed: int | None
    uploads_in_flight: int
    failed: int
    #: with event_time: late rows, paused/idle partitions, watermark skew (None otherwise)
    event_time: EventTimeStatus | None = None
    #: Each stage's part, in the spec's order.
    stages: tuple[StageProgress, ...] = ()
    pipeline: str = ""
