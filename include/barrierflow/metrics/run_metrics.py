"""What a running pipeline exports: each stage's progress and checkpoint figures.

:class:`RunMetrics` is fed by the run loop
(:meth:`barrierflow.runtime.pipeline_runner.PipelineRunner.run`) on the driver, from figures it
already holds: each stage's committed batches and records (its Spark offset log), its
checkpoint coordinator's completed manifests and failures, and each sink's freshness per
checkpoint (:mod:`barrierflow.runtime.freshness`: from aggregates Spark reports per batch).
Nothing is read from the data for it. :meth:`RunMetrics.families` is asked by the HTTP
server's thread; a lock keeps the two consistent. Every sample carries the labels
``pipeline`` and ``stage`` (one stage: the stage is named after the pipeline; a sink's
freshness also ``sink``). The families and their meaning are listed in docs/operations.md.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.metrics.exposition import Family, Histogram, MetricType, render

__all__ = ["DURATION_BUCKETS", "FRESHNESS_BUCKETS", "RunMetrics", "SinkFreshness", "StageFigures"]

#: Upper bounds (seconds) of the checkpoint duration histogram's buckets.
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Upper bounds (seconds) of the checkpoint freshness histogram's buckets.
FRESHNESS_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class SinkFreshness:
    """One sink's freshness figures in this run: one observation per checkpoint committed."""

    histogram: Histogram = field(default_factory=lambda: Histogram(FRESHNESS_BUCKETS))
    last_checkpoint: int | None = None
    last_seconds: float = 0.0


@dataclass
class StageFigures:
    """One stage's figures in this run (counts since the run started)."""

    records: int = 0
    batches: int = 0
    records_per_second: float = 0.0
    completed: int = 0
    failed: int = 0
    dead_letters: int | None = None
    last: Manifest | None = None
    durations: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))
    freshness: dict[str, SinkFreshness] = field(default_factory=dict)
    #: keys the stage's keyed functions started and expired in this run (None: it has none)
    keys: tuple[int, int, int | None] | None = None


class RunMetrics:
    """The figures of one run of pipeline ``pipeline`` (started at ``started``, UTC)."""

    def __init__(self, pipeline: str, *, attempt: int = 0, started: datetime | None = None) -> None:
        self.pipeline = pipeline
        self.attempt = attempt
        self.started = started or datetime.now(UTC)
        if self.started.tzinfo is None:
            raise ValueError("RunMetrics needs a timezone-aware start time")
        self._stages: dict[str, StageFigures] = {}
        self._lock = threading.Lock()

    def _stage(self, stage: str) -> StageFigures:
        return self._stages.setdefault(stage, StageFigures())

    def progress(self, stage: str, *, records: int, batches: int, elapsed: float) -> None:
        """``stage`` committed ``batches`` batches reading ``records`` records in the ``elapsed``
        seconds since the run started (records/s is their quotient, as on the progress line)."""
        with self._lock:
            figures = self._stage(stage)
            figures.records, figures.batches = records, batches
            figures.records_per_second = records / elapsed if elapsed > 0 else 0.0

    def checkpoints(self, stage: str, *, completed: Sequence[Manifest], completed_count: int, failed: int) -> None:
        """``stage``'s coordinator state: its completed manifests (the newest kept, oldest first),
        how many completed in this run and how many failed. Manifests newer than the last one
        seen are observed once into the duration histogram."""
        with self._lock:
            figures = self._stage(stage)
            seen = figures.last.checkpoint_id if figures.last is not None else None
            for manifest in completed:
                if seen is None or manifest.checkpoint_id > seen:
                    figures.durations.observe(manifest.total_ms / 1000.0)
                    figures.last = manifest
            figures.completed, figures.failed = completed_count, failed

    def freshness(self, stage: str, sink: str, checkpoint_id: int, seconds: float) -> None:
        """Sink ``sink`` of ``stage`` committed checkpoint ``checkpoint_id`` ``seconds`` after the
        oldest arrival among the records it made visible; observed once per checkpoint (an id
        not newer than the sink's last one is ignored)."""
        with self._lock:
            figures = self._stage(stage).freshness.setdefault(sink, SinkFreshness())
            if figures.last_checkpoint is not None and checkpoint_id <= figures.last_checkpoint:
                return
            figures.histogram.observe(seconds)
            figures.last_checkpoint, figures.last_seconds = checkpoint_id, seconds

    def keys(self, stage: str, *, started: int, expired: int, live: int | None) -> None:
        """``stage``'s keyed functions started ``started`` keys and expired ``expired`` in this run;
        ``live`` keys are in its state now (None: unknown, not exported)."""
        with self._lock:
            self._stage(stage).keys = (started, expired, live)

    def dead_letters(self, stage: str, count: int) -> None:
        """``stage``'s dead-letter output holds ``count`` records (every run's so far)."""
        with self._lock:
            self._stage(stage).dead_letters = count

    def families(self, now: datetime | None = None) -> list[Family]:
        """Every metric family, the ages taken at ``now`` (default: the current time, UTC)."""
        now = now or datetime.now(UTC)
        fams = {name: Family(name, kind, text) for name, kind, text in _FAMILIES}
        run_labels = {"pipeline": self.pipeline}
        fams["barrierflow_run_start_time_seconds"].add(run_labels, self.started.timestamp())
        fams["barrierflow_run_attempt"].add(run_labels, self.attempt)
        with self._lock:
            for stage, f in sorted(self._stages.items()):
                labels = {"pipeline": self.pipeline, "stage": stage}
                fams["barrierflow_records_total"].add(labels, f.records)
                fams["barrierflow_batches_total"].add(labels, f.batches)
                fams["barrierflow_records_per_second"].add(labels, f.records_per_second)
                fams["barrierflow_checkpoints_completed_total"].add(labels, f.completed)
                fams["barrierflow_checkpoints_failed_total"].add(labels, f.failed)
                since = f.last.completion_time if f.last is not None else self.started
                fams["barrierflow_last_checkpoint_age_seconds"].add(labels, max(0.0, (now - since).total_seconds()))
                if f.last is not None:
                    last = f.last
                    fams["barrierflow_last_checkpoint_id"].add(labels, last.checkpoint_id)
                    fams["barrierflow_last_checkpoint_duration_seconds"].add(labels, last.total_ms / 1000.0)
                    fams["barrierflow_last_checkpoint_full_bytes"].add(labels, last.full_bytes)
                    fams["barrierflow_last_checkpoint_incremental_bytes"].add(labels, last.incremental_bytes)
                    if last.alignment is not None:
                        fams["barrierflow_last_checkpoint_alignment_seconds"].add(
                            labels, last.alignment.alignment_ms / 1000.0)
                    f.durations.samples_into(fams["barrierflow_checkpoint_duration_seconds"], labels)
                if f.dead_letters is not None:
                    fams["barrierflow_dead_letters_total"].add(labels, f.dead_letters)
                if f.keys is not None:
                    fams["barrierflow_keyed_keys_started_total"].add(labels, f.keys[0])
                    fams["barrierflow_keyed_keys_expired_total"].add(labels, f.keys[1])
                    if f.keys[2] is not None:
                        fams["barrierflow_keyed_live_keys"].add(labels, f.keys[2])
                for sink, fresh in sorted(f.freshness.items()):
                    sink_labels = {**labels, "sink": sink}
                    fresh.histogram.samples_into(fams["barrierflow_checkpoint_freshness_seconds"], sink_labels)
                    fams["barrierflow_last_checkpoint_freshness_seconds"].add(sink_labels, fresh.last_seconds)
                    if fresh.last_checkpoint is not None:
                        fams["barrierflow_last_freshness_checkpoint_id"].add(sink_labels, fresh.last_checkpoint)
        return list(fams.values())

    def render(self, now: datetime | None = None) -> str:
        """The exposition text of :meth:`families`."""
        return render(self.families(now))


#: (name, type, help) of every family, in the order they are served.
_FAMILIES: tuple[tuple[str, MetricType, str], ...] = (
    ("barrierflow_run_start_time_seconds", "gauge", "When this run of the pipeline started (Unix time)."),
    ("barrierflow_run_attempt", "gauge", "The attempt this run writes (a restore starts a new one)."),
    ("barrierflow_records_total", "counter", "Records the stage read since the run started."),
    ("barrierflow_batches_total", "counter", "Micro-batches the stage committed since the run started."),
    ("barrierflow_records_per_second", "gauge", "Records read per second since the run started (the progress line's)."),
    ("barrierflow_checkpoints_completed_total", "counter", "Checkpoints of the stage completed since the run started."),
    ("barrierflow_checkpoints_failed_total", "counter", "Checkpoints of the stage that failed since the run started."),
    ("barrierflow_last_checkpoint_id", "gauge", "Id of the stage's newest checkpoint completed in this run."),
    ("barrierflow_last_checkpoint_age_seconds", "gauge",
     "Seconds since the stage's newest checkpoint completed (since the run started if none has)."),
    ("barrierflow_last_checkpoint_duration_seconds", "gauge", "Trigger to completion of the newest checkpoint."),
    ("barrierflow_checkpoint_duration_seconds", "histogram", "Trigger to completion of the run's checkpoints."),
    ("barrierflow_last_checkpoint_full_bytes", "gauge", "Bytes of every file the newest checkpoint references."),
    ("barrierflow_last_checkpoint_incremental_bytes", "gauge", "Bytes the newest checkpoint uploaded itself."),
    ("barrierflow_last_checkpoint_alignment_seconds", "gauge",
     "Barrier alignment time of the newest checkpoint (stages fed by channels)."),
    ("barrierflow_dead_letters_total", "counter", "Malformed records in the stage's dead-letter output."),
    ("barrierflow_checkpoint_freshness_seconds", "histogram",
     "Per checkpoint a sink committed in this run (one observation per checkpoint, not per record): the sink's "
     "commit time minus the oldest source arrival among the records the commit made visible."),
    ("barrierflow_last_checkpoint_freshness_seconds", "gauge",
     "The freshness of the newest checkpoint the sink committed in this run (seconds, as the histogram's)."),
    ("barrierflow_last_freshness_checkpoint_id", "gauge",
     "Id of the checkpoint the sink's last freshness figure is of."),
    ("barrierflow_keyed_keys_started_total", "counter",
     "Keys a stage's keyed functions gave state in this run (a new key, or one whose state had expired)."),
    ("barrierflow_keyed_keys_expired_total", "counter",
     "Keys whose state a stage's ttl expired in this run (a batch replayed after a restore counts again)."),
    ("barrierflow_keyed_live_keys", "gauge",
     "Keys in a stage's keyed state now: those at the query's start plus those started minus those expired since."),
)
