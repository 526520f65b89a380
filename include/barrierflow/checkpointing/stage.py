"""One stage's view of its Spark checkpoint: barrier batches found in Spark's logs.

A stage is one Spark query. Its sources write the newest barrier into every batch's offsets
(sticky, see :mod:`barrierflow.barriers.offsets`), so batch V is the *barrier batch* of
checkpoint n exactly when ``offsets/V`` carries barrier n, the previous committed batch a
smaller one, and ``commits/V`` exists. :class:`StageTracker` follows ``commits/`` and turns
it into :class:`BarrierBatch` events, in batch order, each exactly once per run; it also reads
what the manifest needs about that batch (barrier offsets per source, the time from planning
to committing it) and takes the synchronous snapshot.

It only reads the Spark checkpoint (through :mod:`barrierflow.spark`) and writes into its
own snapshot directory; deciding what a barrier batch means for a checkpoint's lifecycle is
the coordinator's job.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.barriers.offsets import BARRIER_TRIGGERED, SourceOffset
from barrierflow.checkpointing.snapshot import LocalSnapshot, take_local_snapshot, take_object_snapshot
from barrierflow.spark import commit_log, offset_log
from barrierflow.storage.object_dir import ObjectDir, PollThrottle, as_checkpoint_dir


@dataclass(frozen=True)
class BarrierBatch:
    """Spark committed batch ``batch_id``, the barrier batch of ``checkpoint_id``; the epoch
    it closes began at ``first_batch_id``. ``triggered_ms`` is when the checkpoint was triggered
    (Unix epoch, ms) as the batch's offsets record it (``barrier_triggered_ms``; the earliest
    over its sources), None where no source recorded it."""

    checkpoint_id: int
    batch_id: int
    first_batch_id: int
    triggered_ms: int | None = None


class StageTracker:
    """Follows ``commits/`` of one stage's Spark checkpoint; see the module docstring."""

    def __init__(self, spark_checkpoint_dir: str | os.PathLike[str] | ObjectDir, snapshot_dir: str | os.PathLike[str],
                 source_names: Sequence[str]) -> None:
        self.spark_dir = as_checkpoint_dir(spark_checkpoint_dir)
        self._poll = PollThrottle(self.spark_dir)
        self.snapshot_dir = Path(snapshot_dir)
        self.source_names = list(source_names)
        self.last_barrier = 0
        self.last_barrier_batch = -1
        self.last_seen_batch = -1

    def resume(self) -> int:
        """Read where the log stands before the query (re)starts: the newest barrier of a
        committed batch becomes the last one seen. Returns the highest barrier id the log
        used, including the last planned batches (a batch planned but not committed may
        carry a barrier that must not be reused)."""
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        committed = commit_log.committed_batches(self.spark_dir)
        for batch in committed:
            barrier = self.barrier_of(batch)
            if barrier > self.last_barrier:
                self.last_barrier, self.last_barrier_batch = barrier, batch
        self.last_seen_batch = committed[-1] if committed else -1
        planned = offset_log.planned_batches(self.spark_dir)
        max_planned_barrier = max((self.barrier_of(b) for b in planned[-2:]), default=0)
        return max(self.last_barrier, max_planned_barrier)

    def barrier_of(self, batch: int) -> int:
        """The (sticky) barrier id in ``offsets/<batch>``; 0 when the batch is not in the log."""
        return _barrier_in(self._offsets(batch))

    def _offsets(self, batch: int) -> list[dict | None]:
        """``offsets/<batch>``'s source offsets; empty when the batch is not in the log."""
        try:
            return offset_log.read_offsets(self.spark_dir, batch)
        except FileNotFoundError:
            return []

    def new_barrier_batches(self, *, force: bool = False) -> Iterator[BarrierBatch]:
        """The barrier batches committed since the last call, in batch order. Lazy: the
        caller handles each (e.g. snapshots it) before the next is looked for. On object storage
        it looks at most every :data:`~barrierflow.storage.object_dir.LOG_POLL_SECONDS` (a LIST
        each time); a call in between yields nothing, unless ``force`` (the last look after the
        query stopped)."""
        if not self._poll.due() and not force:
            return
        for batch in commit_log.committed_batches(self.spark_dir):
            if batch <= self.last_seen_batch:
                continue
            self.last_seen_batch = batch
            offsets = self._offsets(batch)
            barrier = _barrier_in(offsets)
            if barrier <= self.last_barrier:
                continue
            first_batch = self.last_barrier_batch + 1
            self.last_barrier, self.last_barrier_batch = barrier, batch
            yield BarrierBatch(barrier, batch, first_batch, _triggered_ms_in(offsets, barrier))

    def barrier_offsets(self, batch: int) -> dict[str, dict[str, int]]:
        """Source name -> partition -> end offset of ``batch``. Raises FileNotFoundError if
        the batch left the log, SourceError for an offset that is not barrierflow's."""
        offsets = offset_log.read_offsets(self.spark_dir, batch)
        return {name: SourceOffset.from_json(o).partitions
                for name, o in zip(self.source_names, offsets, strict=False) if o}

    def barrier_batch_ms(self, batch: int) -> float:
        """Milliseconds from Spark planning ``batch`` (``offsets/V``) to committing it
        (``commits/V``): the barrier's time inside the stage. 0.0 when a file is gone."""
        planned = offset_log.planned_at(self.spark_dir, batch)
        committed = commit_log.committed_at(self.spark_dir, batch)
        if planned is None or committed is None:
            return 0.0
        return max(0.0, (committed - planned) * 1000.0)

    def snapshot(self, barrier: BarrierBatch, previous_bases: Mapping[str, int]) -> LocalSnapshot:
        """The synchronous phase for ``barrier``: hard-link its files into its snapshot directory
        (copy them there from object storage, :func:`~barrierflow.checkpointing.snapshot.take_object_snapshot`)."""
        if isinstance(self.spark_dir, ObjectDir):
            return take_object_snapshot(self.spark_dir, self.snapshot_dir, barrier.checkpoint_id, barrier.batch_id,
                                        barrier.first_batch_id, dict(previous_bases))
        return take_local_snapshot(self.spark_dir, self.snapshot_dir, barrier.checkpoint_id, barrier.batch_id,
                                   barrier.first_batch_id, dict(previous_bases))


def _barrier_in(offsets: Sequence[Mapping[str, Any] | None]) -> int:
    """The newest (sticky) barrier id among a batch's source offsets; 0 for none."""
    return max((int(o.get("barrier", 0)) for o in offsets if o), default=0)


def _triggered_ms_in(offsets: Sequence[Mapping[str, Any] | None], barrier: int) -> int | None:
    """When checkpoint ``barrier`` was triggered, as a batch's offsets record it: the earliest
    ``barrier_triggered_ms`` of the sources carrying that barrier; None when none does (older
    offsets). A value that is not a number counts as not recorded: it only times a manifest."""
    times = [int(t) for o in offsets
             if o and int(o.get("barrier", 0)) == barrier
             and isinstance(t := o.get(BARRIER_TRIGGERED), int | float) and not isinstance(t, bool)]
    return min(times, default=None)
