"""Freshness of committed output: how long a record waited from its arrival in the source until
a sink's commit made it visible to the sink's readers.

Definitions (docs/operations.md):

* a record's **arrival** is when its source had it: a Kafka source's record timestamp
  (``timestamp``, CreateTime or LogAppendTime as the topic keeps it); for the generator and for
  channel inputs, the start of the micro-batch that read it (Spark's batch timestamp: the
  generator makes its records when a batch plans them; a throttled generator's may have been
  available up to one trigger interval earlier);
* the **freshness of checkpoint n in sink s** is the time sink ``s``'s commit of checkpoint n
  returned minus the oldest arrival among the records of the epoch it made visible (the
  micro-batches ``first_batch_id`` to ``spark_batch_id`` of manifest n): the wait of the epoch's
  most delayed record. One figure per checkpoint and sink (an epoch without records gives
  none); the histogram over them is a histogram over checkpoints, not over records.

Cost on the data path: the stage's input frame is observed (:func:`observe_arrival`, Spark's
``Dataset.observe``): the oldest and newest arrival of each micro-batch (and its record count)
are aggregates Spark computes while the batch runs, reported in the batch's progress event; no
record reaches the driver and no extra job runs. Without an arrival column only the count is
observed, and the batch's start is its progress event's ``timestamp``. :class:`FreshnessTracker` reads those events (one
``lastProgress`` per committed batch, the recent ones only after a gap, as the event-time
tracker does) and the sink commits the coordinator's notifier recorded
(:attr:`~barrierflow.checkpointing.sink_notifier.SinkNotifier.commits`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.sink_notifier import SinkCommit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

__all__ = ["ARRIVAL_METRIC", "Freshness", "FreshnessTracker", "observe_arrival", "percentile"]

#: The name of the observed metrics of each micro-batch's arrivals (``oldest``, ``newest``:
#: Unix microseconds, null for a batch without records).
ARRIVAL_METRIC = "barrierflow_arrival"
#: Micro-batches whose arrivals a tracker keeps.
KEEP_BATCHES = 10_000
#: Figures a tracker keeps per sink (the run's summary and the metrics read them).
KEEP_FIGURES = 10_000
#: Batches a commit waits for its epoch's arrivals to be reported before it is given up.
GIVE_UP_BATCHES = 200


def observe_arrival(frame: DataFrame, arrival_column: str | None) -> DataFrame:
    """``frame`` observed under :data:`ARRIVAL_METRIC`: the oldest and newest value of timestamp
    column ``arrival_column`` per micro-batch (None: the batch's start time, for sources whose
    records carry no arrival time)."""
    from pyspark.sql import functions as F

    records = F.count(F.lit(1)).alias("records")
    if arrival_column is None:  # the batch's start: its progress event's timestamp (Spark refuses it observed)
        return frame.observe(ARRIVAL_METRIC, records)
    arrival = F.col(arrival_column)
    return frame.observe(ARRIVAL_METRIC, F.unix_micros(F.min(arrival)).alias("oldest"),
                         F.unix_micros(F.max(arrival)).alias("newest"), records)


@dataclass(frozen=True)
class Freshness:
    """Checkpoint ``checkpoint_id``'s freshness in sink ``sink`` (module docstring): its commit
    returned at ``committed_at``; its epoch's records arrived from ``oldest_arrival`` to
    ``newest_arrival``."""

    sink: str
    checkpoint_id: int
    committed_at: datetime
    oldest_arrival: datetime
    newest_arrival: datetime

    @property
    def seconds(self) -> float:
        """Commit time minus the oldest arrival (the epoch's most delayed record)."""
        return (self.committed_at - self.oldest_arrival).total_seconds()

    @property
    def newest_seconds(self) -> float:
        """Commit time minus the newest arrival (the epoch's least delayed record)."""
        return (self.committed_at - self.newest_arrival).total_seconds()

    def as_dict(self) -> dict[str, object]:
        """What is stored beside the checkpoint (``chk-<n>/_freshness.json``, per sink)."""
        return {"seconds": self.seconds, "committed_at": self.committed_at.isoformat(),
                "oldest_arrival": self.oldest_arrival.isoformat(), "newest_arrival": self.newest_arrival.isoformat()}

    @classmethod
    def from_dict(cls, sink: str, checkpoint_id: int, record: Mapping[str, Any]) -> Freshness:
        """The figure :meth:`as_dict` stored for ``sink`` and ``checkpoint_id``.

        Raises:
            KeyError, ValueError: the record lacks a time or holds one that does not parse.
        """
        return cls(sink, checkpoint_id, datetime.fromisoformat(str(record["committed_at"])),
                   datetime.fromisoformat(str(record["oldest_arrival"])),
                   datetime.fromisoformat(str(record["newest_arrival"])))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty): the smallest value with at least
    ``fraction`` of them at or below it."""
    if not values:
        raise ValueError("a percentile of no values")
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(fraction * len(ordered) - 1e-9)))
    return ordered[rank - 1]


def _from_us(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(us))


class FreshnessTracker:
    """One stage's freshness figures in a run (module docstring): :meth:`poll` after each
    committed micro-batch, :meth:`collect` each tick; :attr:`figures` per sink, oldest first."""

    def __init__(self) -> None:
        #: batch id -> (oldest, newest) arrival, both None for a batch without records
        self.arrivals: dict[int, tuple[datetime | None, datetime | None]] = {}
        self.figures: dict[str, list[Freshness]] = {}
        self._newest_batch: int | None = None
        self._seen: set[tuple[str, int]] = set()
        self._waiting: list[SinkCommit] = []

    @property
    def waiting(self) -> bool:
        """Whether a sink commit waits for its epoch's arrivals (the next :meth:`poll` may bring them)."""
        return bool(self._waiting)

    def poll(self, query: Any, *, full: bool = False) -> None:
        """Fold the arrivals the query's progress reports in: its newest event, and its recent
        ones when ``full``, on the first poll, or after a gap (a batch committed unseen)."""
        try:
            events: list[Any] = []
            if not full and self._newest_batch is not None:
                last = query.lastProgress
                if last is None:
                    return
                events = [last]
                full = int(last.batchId) > self._newest_batch + 1
            if full or self._newest_batch is None:
                events = list(query.recentProgress)
        except Exception as exc:  # the query is stopping: keep what is known
            log.debug("query progress unavailable: %s", exc)
            return
        for event in events:
            observed = (getattr(event, "observedMetrics", None) or {}).get(ARRIVAL_METRIC)
            if observed is None:
                continue
            batch = int(event.batchId)
            fields = observed.asDict()
            if "oldest" not in fields:  # no arrival column: the batch's start, if it read records
                started = datetime.fromisoformat(str(event.timestamp).replace("Z", "+00:00")) \
                    if fields.get("records") else None
                self.arrivals[batch] = (started, started)
            else:
                oldest, newest = fields["oldest"], fields["newest"]
                self.arrivals[batch] = (_from_us(oldest) if oldest is not None else None,
                                        _from_us(newest) if newest is not None else None)
            self._newest_batch = batch if self._newest_batch is None else max(batch, self._newest_batch)
        while len(self.arrivals) > KEEP_BATCHES:
            del self.arrivals[min(self.arrivals)]

    def collect(self, commits: Iterable[SinkCommit], completed: Sequence[Manifest]) -> list[Freshness]:
        """The figures of the sink commits not seen yet (``commits``: every commit the stage's
        notifier remembers, oldest first) whose epochs' arrivals are known; ``completed``: the
        coordinator's completed manifests. A commit whose manifest or arrivals are not known yet
        waits for a later call (given up :data:`GIVE_UP_BATCHES` batches after its epoch);
        returns the new figures, which :attr:`figures` also holds."""
        commits = list(commits)
        fresh = [c for c in commits if (c.sink, c.checkpoint_id) not in self._seen]
        self._seen = {(c.sink, c.checkpoint_id) for c in commits}  # what the notifier still remembers
        waiting, self._waiting = [*self._waiting, *fresh], []
        manifests = {m.checkpoint_id: m for m in completed}
        out: list[Freshness] = []
        for commit in waiting:
            manifest = manifests.get(commit.checkpoint_id)
            if manifest is None:
                continue  # retained no longer, or from another run: nothing to measure it by
            batches = [self.arrivals.get(b) for b in range(manifest.first_batch_id, manifest.spark_batch_id + 1)]
            if any(b is None for b in batches):
                if self._newest_batch is None or self._newest_batch < manifest.spark_batch_id + GIVE_UP_BATCHES:
                    self._waiting.append(commit)
                continue
            oldest = [o for o, _ in batches if o is not None]  # type: ignore[misc]
            newest = [n for _, n in batches if n is not None]  # type: ignore[misc]
            if not oldest:
                continue  # the epoch made no record visible
            figure = Freshness(commit.sink, commit.checkpoint_id, commit.at, min(oldest), max(newest))
            kept = self.figures.setdefault(commit.sink, [])
            kept.append(figure)
            del kept[:-KEEP_FIGURES]
            out.append(figure)
        return out
