"""Event time seen from the job: the sources' per-batch watermark history, Spark's count of
rows dropped as late, and the manifest's ``event_time`` section built from both.

:class:`EventTimeTracker` lives in the job's driver process beside the coordinator:

* :meth:`EventTimeTracker.poll` reads the query's recent progress and keeps Spark's
  ``numRowsDroppedByWatermark`` (summed over the query's stateful operators) per batch id
  (bounded: the newest :data:`KEEP_BATCHES`);
* :meth:`EventTimeTracker.summary` builds a checkpoint's
  :class:`~barrierflow.checkpointing.manifest.EventTimeSummary`: per partition the watermark at
  the barrier (its max event time minus the delay: generator exact, Kafka from the per-range
  event times), the idle/paused state and pause counters of the barrier batch's history record
  (:mod:`barrierflow.flow_control.watermark_history`), and the late rows of the epoch's batches
  (None when Spark has not reported one of them);
* :meth:`EventTimeTracker.status` is what the progress line shows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from barrierflow.checkpointing.manifest import EventTimeSummary, PartitionWatermark
from barrierflow.flow_control.watermark_history import WatermarkHistory
from barrierflow.spec.models import StageSpec

log = logging.getLogger(__name__)
KEEP_BATCHES = 10_000


@dataclass(frozen=True)
class EventTimeStatus:
    """For the progress line: late rows so far, the partitions paused and idle in the newest
    planned batch, and its watermark skew (newest minus oldest known, seconds)."""

    rows_dropped_late: int
    paused: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)
    watermark_skew_seconds: float | None = None


def dropped_by_watermark(progress: Any) -> int:
    """Spark's ``numRowsDroppedByWatermark`` of one progress event, over its stateful operators."""
    return sum(int(op.numRowsDroppedByWatermark) for op in (progress.stateOperators or []))


def ran_a_batch(progress: Any) -> bool:
    """Whether a progress event is of a trigger that ran its batch (its durations name
    ``addBatch``; a batch of no data, run to advance a watermark, does too), not of a trigger
    that found nothing to run. An event without durations counts as one that ran."""
    durations = getattr(progress, "durationMs", None)
    return durations is None or "addBatch" in durations


class EventTimeTracker:
    def __init__(self, spec: StageSpec, control_dir: str) -> None:
        if spec.event_time is None:
            raise ValueError("EventTimeTracker needs a spec with event_time")
        self.spec = spec
        self.event_time = spec.event_time
        self.history = WatermarkHistory(control_dir)
        self.dropped: dict[int, int] = {}
        #: The newest batch up to which every batch that ran was folded in (None: no poll saw
        #: one yet): a newer event past the batch after it means batches went unseen.
        self._contiguous: int | None = None

    def poll(self, query: Any, *, full: bool = False) -> None:
        """Fold the query's progress into the per-batch late-row counts: its newest progress
        event (``lastProgress``, one event over py4j), and all of its recent ones
        (``recentProgress``, up to Spark's ``numRecentProgressUpdates``, each serialised in the
        JVM and parsed here) only when ``full``, on the first poll, or when the newest event
        is past a batch not counted yet (batches ended unseen since the last poll). A run's
        tick polls after every micro-batch it sees commit, so the full read is the exception.

        A batch counts as seen, for that gap check, only from an event of a trigger that ran
        it (:func:`ran_a_batch`): Spark also reports, every ``noDataProgressEventInterval``, a
        trigger that ran none."""
        try:
            full = full or self._contiguous is None
            if not full:
                last = query.lastProgress
                if last is None:
                    return
                events = [last]
                full = int(last.batchId) > self._contiguous + 1  # type: ignore[operator]
            if full:
                events = list(query.recentProgress)
        except Exception as exc:  # the query is stopping: keep what is known
            log.debug("query progress unavailable: %s", exc)
            return
        for event in events:
            batch = int(event.batchId)
            self.dropped[batch] = max(self.dropped.get(batch, 0), dropped_by_watermark(event))
            if ran_a_batch(event) and (full or batch == self._contiguous + 1):  # type: ignore[operator]
                self._contiguous = batch if self._contiguous is None else max(batch, self._contiguous)
        while len(self.dropped) > KEEP_BATCHES:
            del self.dropped[min(self.dropped)]

    @property
    def rows_dropped_total(self) -> int:
        return sum(self.dropped.values())

    def rows_dropped(self, first_batch: int, last_batch: int) -> int | None:
        """Late rows of batches ``first_batch..last_batch`` (None: one of them not reported yet)."""
        counts = [self.dropped.get(b) for b in range(first_batch, last_batch + 1)]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def status(self) -> EventTimeStatus:
        latest = self.history.latest()
        if latest is None:
            return EventTimeStatus(self.rows_dropped_total)
        known = [w for w in latest.watermarks.values() if w is not None]
        skew = (max(known) - min(known)).total_seconds() if len(known) >= 2 else None
        return EventTimeStatus(self.rows_dropped_total, latest.paused, latest.idle, skew)

    def summary(self, first_batch: int, batch: int, barrier_offsets: dict[str, dict[str, int]],
                max_event_time: dict[str, dict[str, datetime | None]], query: Any = None) -> EventTimeSummary:
        """The manifest's ``event_time`` section for the checkpoint whose barrier batch is ``batch``."""
        if query is not None:
            self.poll(query)
            if self.rows_dropped(first_batch, batch) is None:
                self.poll(query, full=True)
        delay = timedelta(seconds=self.event_time.watermark_delay)
        alignment = self.event_time.alignment
        partitions: dict[str, dict[str, PartitionWatermark]] = {}
        for source, offsets in barrier_offsets.items():
            record = self.history.ending_at(offsets)
            times = max_event_time.get(source, {})
            partitions[source] = {
                p: PartitionWatermark(
                    watermark=(t - delay) if (t := times.get(p)) is not None else None,
                    idle=record is not None and p in record.idle,
                    paused=record is not None and p in record.paused,
                    pauses=record.pauses.get(p, 0) if record else 0,
                    paused_seconds=record.paused_seconds.get(p, 0.0) if record else 0.0,
                ) for p in offsets
            }
        return EventTimeSummary(
            watermark_delay_seconds=self.event_time.watermark_delay,
            alignment_group=alignment.group if alignment else None,
            max_drift_seconds=alignment.max_drift if alignment else None,
            partitions=partitions,
            rows_dropped_by_watermark=self.rows_dropped(first_batch, batch),
            rows_dropped_total=self.rows_dropped_total,
        )
