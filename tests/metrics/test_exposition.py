"""The metrics of a run of several stages, without Spark: what :class:`RunMetrics` exposes when
the run loop feeds it, served over HTTP by :class:`MetricsServer`.

What could go wrong and is checked: a stage's figures under another stage's labels, a
checkpoint observed twice into the histogram (the coordinator keeps its newest manifests and
is read every tick), cumulative buckets that are not cumulative, ages taken from the wrong
clock, an alignment time exported for a stage that has none, label values not escaped, and a
server that keeps its address file after it stopped or answers other paths.
"""

from __future__ import annotations

import urllib.error
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from barrierflow.checkpointing.manifest import AlignmentSummary, Manifest
from barrierflow.errors import UserInputError
from barrierflow.metrics import MetricsServer, RunMetrics, read_address
from barrierflow.metrics.exposition import CONTENT_TYPE, Family, render
from barrierflow.spec.metrics import MetricsSpec

from tests.metrics.scrape import parse, scrape, value

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def manifest(cid: int, *, completed: datetime, total_ms: float, full: int, incremental: int,
             alignment_ms: float | None = None) -> Manifest:
    alignment = (AlignmentSummary(mode="aligned", alignment_ms=alignment_ms, barrier_offsets={"c:0": 5})
                 if alignment_ms is not None else None)
    return Manifest(
        pipeline="shop", checkpoint_id=cid, attempt=1, spark_batch_id=cid, first_batch_id=cid, state_version=cid + 1,
        barrier_offsets={"events": {"0": 10 * cid}}, max_event_time={"events": {"0": None}},
        trigger_time=completed - timedelta(milliseconds=total_ms), barrier_time=completed, completion_time=completed,
        barrier_batch_ms=1.0, sync_ms=1.0, async_ms=1.0, total_ms=total_ms, full_bytes=full,
        incremental_bytes=incremental, files=[], alignment=alignment)


def two_stage_metrics() -> RunMetrics:
    """A run of stages ``a`` (reads the source) and ``b`` (fed by a channel) as the run loop feeds it."""
    metrics = RunMetrics("shop", attempt=2, started=T0)
    a1 = manifest(1, completed=T0 + timedelta(seconds=10), total_ms=800, full=4000, incremental=4000)
    a2 = manifest(2, completed=T0 + timedelta(seconds=20), total_ms=3000, full=6000, incremental=2000)
    b1 = manifest(1, completed=T0 + timedelta(seconds=11), total_ms=1500, full=900, incremental=900, alignment_ms=250)
    # Tick after tick: the coordinators' lists are read again and again.
    metrics.checkpoints("a", completed=[a1], completed_count=1, failed=0)
    metrics.checkpoints("a", completed=[a1, a2], completed_count=2, failed=1)
    metrics.checkpoints("a", completed=[a1, a2], completed_count=2, failed=1)
    metrics.checkpoints("b", completed=[b1], completed_count=1, failed=0)
    metrics.progress("a", records=1000, batches=8, elapsed=20.0)
    metrics.progress("b", records=700, batches=6, elapsed=20.0)
    metrics.dead_letters("a", 3)
    return metrics


def test_each_stage_is_exposed_under_its_own_labels_with_its_checkpoint_figures() -> None:
    text = two_stage_metrics().render(now=T0 + timedelta(seconds=25))
    samples, types = parse(text)
    a, b = {"pipeline": "shop", "stage": "a"}, {"pipeline": "shop", "stage": "b"}

    assert value(samples, "barrierflow_run_attempt", pipeline="shop") == 2
    assert value(samples, "barrierflow_run_start_time_seconds", pipeline="shop") == T0.timestamp()
    assert (value(samples, "barrierflow_records_total", **a), value(samples, "barrierflow_records_total", **b)) \
        == (1000, 700)
    assert value(samples, "barrierflow_batches_total", **b) == 6
    assert value(samples, "barrierflow_records_per_second", **a) == 50.0
    assert value(samples, "barrierflow_checkpoints_completed_total", **a) == 2
    assert value(samples, "barrierflow_checkpoints_failed_total", **a) == 1
    assert value(samples, "barrierflow_checkpoints_failed_total", **b) == 0
    assert value(samples, "barrierflow_last_checkpoint_id", **a) == 2
    assert value(samples, "barrierflow_last_checkpoint_age_seconds", **a) == 5.0
    assert value(samples, "barrierflow_last_checkpoint_age_seconds", **b) == 14.0
    assert value(samples, "barrierflow_last_checkpoint_duration_seconds", **a) == 3.0
    assert value(samples, "barrierflow_last_checkpoint_full_bytes", **a) == 6000
    assert value(samples, "barrierflow_last_checkpoint_incremental_bytes", **a) == 2000
    assert value(samples, "barrierflow_last_checkpoint_alignment_seconds", **b) == 0.25
    assert ("barrierflow_last_checkpoint_alignment_seconds", frozenset(a.items())) not in samples
    assert value(samples, "barrierflow_dead_letters_total", **a) == 3
    assert ("barrierflow_dead_letters_total", frozenset(b.items())) not in samples  # never counted: not exposed

    # The histogram saw each checkpoint once: a's 0.8 s and 3 s, cumulative buckets.
    assert value(samples, "barrierflow_checkpoint_duration_seconds_count", **a) == 2
    assert value(samples, "barrierflow_checkpoint_duration_seconds_sum", **a) == 3.8
    buckets = {le: value(samples, "barrierflow_checkpoint_duration_seconds_bucket", **a, le=le)
               for le in ("0.5", "1", "2.5", "5", "+Inf")}
    assert buckets == {"0.5": 0, "1": 1, "2.5": 1, "5": 2, "+Inf": 2}
    assert value(samples, "barrierflow_checkpoint_duration_seconds_bucket", **b, le="2.5") == 1

    assert types["barrierflow_records_total"] == "counter"
    assert types["barrierflow_checkpoint_duration_seconds"] == "histogram"
    assert types["barrierflow_last_checkpoint_age_seconds"] == "gauge"


def test_a_stage_without_a_checkpoint_counts_its_age_from_the_start_of_the_run() -> None:
    metrics = RunMetrics("shop", started=T0)
    metrics.progress("a", records=0, batches=0, elapsed=0.0)
    samples, _ = parse(metrics.render(now=T0 + timedelta(seconds=42)))
    assert value(samples, "barrierflow_last_checkpoint_age_seconds", pipeline="shop", stage="a") == 42.0
    assert value(samples, "barrierflow_records_per_second", pipeline="shop", stage="a") == 0.0
    assert not any(name == "barrierflow_last_checkpoint_id" for name, _ in samples)


def test_label_values_are_escaped() -> None:
    family = Family("x_total", "counter", "help")
    family.add({"stage": 'a"b\\c\nd'}, 1)
    assert render([family]).splitlines()[-1] == 'x_total{stage="a\\"b\\\\c\\nd"} 1'
    samples, _ = parse(render([family]))
    assert value(samples, "x_total", stage='a"b\\c\nd') == 1


def test_the_server_serves_metrics_writes_its_address_and_removes_it(tmp_path: Path) -> None:
    with MetricsServer(two_stage_metrics(), MetricsSpec(port=0), work_dir=tmp_path) as server:
        address = read_address(tmp_path)
        assert address is not None and address["url"] == server.url and address["port"] == server.address[1] != 0
        body, content_type = scrape(server.url)
        assert content_type == CONTENT_TYPE
        samples, _ = parse(body)
        assert value(samples, "barrierflow_records_total", pipeline="shop", stage="b") == 700
        with pytest.raises(urllib.error.HTTPError) as missing:
            scrape(server.url.replace("/metrics", "/other"))
        assert missing.value.code == 404
        # A second server on the same port is refused with the address and the fix.
        with pytest.raises(UserInputError, match=rf"127\.0\.0\.1:{server.address[1]}.*metrics\.port"):
            MetricsServer(RunMetrics("x"), MetricsSpec(port=server.address[1]), work_dir=tmp_path / "x").start()
    assert read_address(tmp_path) is None
