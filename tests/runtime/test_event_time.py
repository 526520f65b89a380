"""EventTimeTracker (no Spark): late rows per batch from progress events, the manifest's
event_time section from the barrier batch's history record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

from barrierflow.flow_control.watermark_history import BatchRecord, WatermarkHistory
from barrierflow.runtime.event_time import EventTimeTracker

from tests.pipeline_specs import make_spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def progress(batch: int, *dropped: int, ran: bool = True) -> SimpleNamespace:
    return SimpleNamespace(batchId=batch, durationMs={"addBatch": 1, "triggerExecution": 2} if ran else
                           {"latestOffset": 1, "triggerExecution": 1},
                           stateOperators=[SimpleNamespace(numRowsDroppedByWatermark=d) for d in dropped])


class Query:
    """A streaming query's progress as the tracker reads it, counting the full reads."""

    def __init__(self, *events: SimpleNamespace) -> None:
        self.events = list(events)
        self.full_reads = 0

    @property
    def lastProgress(self) -> SimpleNamespace | None:
        return self.events[-1] if self.events else None

    @property
    def recentProgress(self) -> list[SimpleNamespace]:
        self.full_reads += 1
        return self.events[-100:]


def test_late_rows_per_batch_and_epoch(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, event_time={"watermark_delay": "5s"})
    tracker = EventTimeTracker(spec, str(tmp_path / "control"))
    tracker.poll(Query(progress(0), progress(1, 3, 4), progress(2, 0)))
    tracker.poll(Query(progress(2, 5)))
    tracker.poll(Query(progress(2, 0)))  # the larger count stays
    assert tracker.rows_dropped(0, 2) == 12 and tracker.rows_dropped(1, 1) == 7
    assert tracker.rows_dropped(2, 3) is None  # batch 3 not reported yet
    assert tracker.rows_dropped_total == 12 and tracker.status().rows_dropped_late == 12


def test_summary_takes_watermarks_from_event_times_and_state_from_the_barrier_batch(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, event_time={"watermark_delay": "5s", "alignment": {"group": "g", "max_drift": "2s"}})
    history = WatermarkHistory(tmp_path / "control")
    history.append(BatchRecord(planned_at=T0, start={"0": 0, "1": 0}, end={"0": 0, "1": 10}, barrier=1,
                               watermarks={"0": T0, "1": T0 - timedelta(seconds=60)}, paused=["0"],
                               pauses={"0": 1, "1": 0}, paused_seconds={"0": 0.5, "1": 0.0}))
    history.append(BatchRecord(planned_at=T0, start={"0": 0, "1": 10}, end={"0": 0, "1": 20}, barrier=1,
                               watermarks={"0": T0, "1": T0}, idle=["1"], pauses={"0": 1}))
    tracker = EventTimeTracker(spec, str(tmp_path / "control"))
    tracker.poll(Query(progress(4, 2), progress(5, 0)))
    summary = tracker.summary(4, 5, {"events": {"0": 0, "1": 10}}, {"events": {"0": None, "1": T0}})
    p0, p1 = summary.partitions["events"]["0"], summary.partitions["events"]["1"]
    assert p0.watermark is None and p0.paused and p0.pauses == 1 and p0.paused_seconds == 0.5
    assert p1.watermark == T0 - timedelta(seconds=5) and not p1.paused and not p1.idle
    assert (summary.alignment_group, summary.max_drift_seconds, summary.watermark_delay_seconds) == ("g", 2.0, 5.0)
    assert summary.rows_dropped_by_watermark == 2 and summary.rows_dropped_total == 2
    assert tracker.status().idle == ["1"] and tracker.status().watermark_skew_seconds == 0.0


def test_a_poll_after_each_batch_reads_only_the_newest_progress_event(tmp_path: Path) -> None:
    """The run's tick polls after each batch it sees commit: one event over py4j, not Spark's
    hundred recent ones, unless batches went unseen since the last poll."""
    tracker = EventTimeTracker(make_spec(tmp_path, event_time={"watermark_delay": "5s"}), str(tmp_path / "control"))
    query = Query(progress(7, 1))
    tracker.poll(query)  # the first poll reads everything Spark keeps
    assert query.full_reads == 1
    for batch in (8, 9):
        query.events.append(progress(batch, 1))
        tracker.poll(query)
    query.events.append(progress(10, ran=False))  # a trigger that ran nothing: no batch seen
    tracker.poll(query)
    query.events.append(progress(10, 2))  # then batch 10 ran (a batch of no data counts too)
    tracker.poll(query)
    assert query.full_reads == 1 and tracker.rows_dropped(7, 10) == 5
    query.events += [progress(11, 4), progress(12, 8)]  # two batches between polls
    tracker.poll(query)
    assert query.full_reads == 2 and tracker.rows_dropped(11, 12) == 12
    query.events.append(progress(13, 16))
    tracker.poll(query)
    assert query.full_reads == 2 and tracker.rows_dropped_total == 33
