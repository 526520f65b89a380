"""The freshness of committed output, without Spark: :class:`FreshnessTracker` fed progress events
as Spark reports them and sink commits as the notifier records them, and its figures in the
metrics (:class:`RunMetrics`) and in the run's summary.

What could go wrong and is checked: a figure measured from another batch than the epoch's (the
manifest's first to barrier batch), from the newest arrival instead of the oldest, or before
every batch of the epoch was reported (a commit seen before the barrier batch's progress); a
commit counted twice (the notifier's list is read every tick); an epoch without records given
a figure; the batch's start not taken for a source without an arrival column; a histogram over
records rather than checkpoints; percentiles off by one rank.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from barrierflow.checkpointing.sink_notifier import SinkCommit
from barrierflow.metrics import RunMetrics
from barrierflow.ops.run import freshness_lines
from barrierflow.runtime.freshness import ARRIVAL_METRIC, FreshnessTracker, percentile

from tests.metrics.scrape import parse, value
from tests.metrics.test_exposition import manifest

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def us(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def event(batch: int, oldest: datetime | None, newest: datetime | None, records: int) -> Any:
    fields = {"oldest": us(oldest) if oldest else None, "newest": us(newest) if newest else None, "records": records}
    return SimpleNamespace(batchId=batch, timestamp="2026-05-01T11:00:00.000Z",
                           observedMetrics={ARRIVAL_METRIC: SimpleNamespace(asDict=lambda: fields)})


class Query:
    """What the tracker asks of a streaming query: its newest and recent progress events."""

    def __init__(self) -> None:
        self.recentProgress: list[Any] = []

    @property
    def lastProgress(self) -> Any:
        return self.recentProgress[-1] if self.recentProgress else None


def epoch(cid: int, first: int, barrier: int) -> Any:
    return manifest(cid, completed=T0, total_ms=10, full=1, incremental=1).model_copy(
        update={"first_batch_id": first, "spark_batch_id": barrier})


def test_a_checkpoints_freshness_is_its_commit_minus_the_oldest_arrival_of_its_epoch() -> None:
    query, tracker = Query(), FreshnessTracker()
    s = timedelta(seconds=1)
    query.recentProgress += [event(0, T0, T0 + s, 10), event(1, T0 - 2 * s, T0 + 2 * s, 5)]
    tracker.poll(query)
    query.recentProgress += [event(2, None, None, 0), event(3, T0 + 3 * s, T0 + 4 * s, 7)]
    tracker.poll(query)  # a gap (batch 2 unseen): the recent events are read
    manifests = [epoch(1, 0, 1), epoch(2, 2, 3), epoch(3, 4, 4)]
    commits = [SinkCommit("out", 1, T0 + 5 * s), SinkCommit("audit", 1, T0 + 6 * s),
               SinkCommit("out", 2, T0 + 7 * s), SinkCommit("out", 3, T0 + 8 * s)]

    new = tracker.collect(commits, manifests)

    # Checkpoint 1: batches 0-1, oldest arrival T0 - 2 s; 2: batches 2 (empty) and 3.
    assert [(f.sink, f.checkpoint_id, f.seconds, f.newest_seconds) for f in new] == [
        ("out", 1, 7.0, 3.0), ("audit", 1, 8.0, 4.0), ("out", 2, 4.0, 3.0)]
    assert tracker.collect(commits, manifests) == []  # the same list again: nothing new, 3 still waits
    query.recentProgress.append(event(4, T0 + 6 * s, T0 + 6 * s, 1))
    tracker.poll(query)
    [late] = tracker.collect(commits, manifests)  # its barrier batch reported after its commit
    assert (late.checkpoint_id, late.seconds) == (3, 2.0)
    assert [f.checkpoint_id for f in tracker.figures["out"]] == [1, 2, 3]
    assert late.as_dict()["oldest_arrival"] == (T0 + 6 * s).isoformat()


def test_an_epoch_without_records_has_no_figure_and_a_batch_without_arrival_column_starts_at_its_start() -> None:
    query, tracker = Query(), FreshnessTracker()
    started = datetime(2026, 5, 1, 11, 0, tzinfo=UTC)  # the events' timestamp
    query.recentProgress += [event(0, None, None, 0),
                             SimpleNamespace(batchId=1, timestamp="2026-05-01T11:00:00.000Z",
                                             observedMetrics={ARRIVAL_METRIC: SimpleNamespace(
                                                 asDict=lambda: {"records": 4})})]
    tracker.poll(query)
    commits = [SinkCommit("out", 1, started + timedelta(seconds=3)), SinkCommit("out", 2, started)]
    figures = tracker.collect(commits, [epoch(1, 0, 1), epoch(2, 0, 0)])
    assert [(f.checkpoint_id, f.seconds) for f in figures] == [(1, 3.0)]


def test_the_histogram_is_over_checkpoints_each_observed_once_per_sink() -> None:
    metrics = RunMetrics("shop", started=T0)
    for _ in range(2):  # tick after tick the same figures come again
        metrics.freshness("a", "out", 1, 0.4)
        metrics.freshness("a", "out", 2, 2.5)
    metrics.freshness("a", "db", 2, 1.2)
    samples, types = parse(metrics.render(T0))
    labels = {"pipeline": "shop", "stage": "a", "sink": "out"}
    assert types["barrierflow_checkpoint_freshness_seconds"] == "histogram"
    assert value(samples, "barrierflow_checkpoint_freshness_seconds_count", **labels) == 2
    assert value(samples, "barrierflow_checkpoint_freshness_seconds_sum", **labels) == 2.9
    assert value(samples, "barrierflow_checkpoint_freshness_seconds_bucket", **labels, le="0.5") == 1
    assert value(samples, "barrierflow_checkpoint_freshness_seconds_bucket", **labels, le="3") == 2
    assert value(samples, "barrierflow_last_checkpoint_freshness_seconds", **labels) == 2.5
    assert value(samples, "barrierflow_last_freshness_checkpoint_id", **labels) == 2
    assert value(samples, "barrierflow_checkpoint_freshness_seconds_count", pipeline="shop", stage="a",
                 sink="db") == 1


def test_percentiles_are_nearest_rank_and_the_summary_names_them() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)) == (50.0, 99.0, 100.0)
    assert percentile([3.0], 0.99) == 3.0
    with pytest.raises(ValueError):
        percentile([], 0.5)
    figure = SimpleNamespace(seconds=1.5)
    assert freshness_lines({("a", "out"): [figure, figure]}, stages=2) == [
        "freshness (stage a, sink out: commit minus oldest arrival, per checkpoint): p50 1.50 s, p99 1.50 s over "
        "2 checkpoints"]
