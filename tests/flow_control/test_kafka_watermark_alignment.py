"""Watermark alignment on a Kafka source (a real Kafka-protocol broker), on a real query.

Partition 1 of the topic holds records ten minutes behind partition 0 in event time (JSON
field ``event_time``). Keyed 10 s windows with a 5 s watermark delay: without alignment the
first batch reads both partitions and Spark's one watermark jumps to partition 0's event
time, so every later record of partition 1 is late and dropped (tests/flow_control/
test_watermark_alignment.py measures that on the generator). With ``max_drift`` 2 s the
driver peeks at each partition's next record, pauses partition 0 while partition 1 is far
behind, caps partition 1's batches at the alignment ceiling, and lets partition 0 go once
partition 1 ran out and went idle: nothing is dropped and the committed window counts equal
the counts computed from the produced records.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.flow_control.watermark_history import WatermarkHistory
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_spec

from tests.pipeline_specs import spec_dict
from tests.support.kafka_broker import KafkaEndpoint, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
RECORDS = 400  # per partition, 100 ms of event time apart
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SKEW = [timedelta(0), timedelta(minutes=-10)]
DELAY, WINDOW = 5.0, timedelta(seconds=10)


def _event_time(partition: int, i: int) -> datetime:
    return T0 + SKEW[partition] + timedelta(milliseconds=100 * i)


def test_alignment_on_a_kafka_source_keeps_a_lagging_partitions_records(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    topic = f"skew-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [
        (p, None, json.dumps({"key": i % 5, "value": i, "event_time": _event_time(p, i).isoformat()}).encode(), None)
        for i in range(RECORDS) for p in (0, 1)])
    data = spec_dict(tmp_path, name="kskew")
    data["sources"] = [{"name": "in", "type": "kafka", "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                        "topics": [topic], "format": "json", "max_records_per_batch": 100, "poll_timeout": 5.0,
                        "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}}]
    data["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                              "output_mode": "append", "options": {"window": "10 seconds"}}
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    data["event_time"] = {"column": "event_time", "watermark_delay": f"{DELAY:g}s", "idle_timeout": "1s",
                          "alignment": {"max_drift": "2s", "update_interval": "0s"}}
    data["checkpoint"]["interval"] = "1s"
    spec = parse_spec(data)
    ends = {f"{topic}:{p}": RECORDS for p in (0, 1)}

    def read_to_the_end(job: StreamingJob) -> bool:
        """Two checkpoints at the topic's end (the second one after the batch that emits the
        windows the final watermark closed), as --until-exhausted does for bounded sources."""
        done = job.coordinator.completed if job.coordinator is not None else []
        return sum(1 for m in done if m.barrier_offsets.get("in") == ends) >= 2

    result = StreamingJob(spec, spark=spark).run(duration=120, until=read_to_the_end)
    assert result.completed, result.failed
    last = result.completed[-1]
    assert last.barrier_offsets["in"] == ends, f"not read to the end: {last.barrier_offsets}"

    # Nothing dropped as late (Spark's numRowsDroppedByWatermark over every batch of the run).
    assert last.event_time is not None
    late = last.event_time.rows_dropped_total
    assert late == 0, f"Spark dropped {late} rows as late"
    # Partition 0 waited while partition 1 was far behind.
    history = WatermarkHistory(tmp_path / "work" / "control").records()
    assert any(f"{topic}:0" in r.paused for r in history), "partition 0 was never paused"

    # Committed counts equal the counts computed from the produced records (closed windows).
    direct: Counter[tuple[datetime, int]] = Counter()
    for p in (0, 1):
        for i in range(RECORDS):
            when = _event_time(p, i)
            direct[(datetime.fromtimestamp(when.timestamp() // 10 * 10, UTC), i % 5)] += 1
    watermark = _event_time(0, RECORDS - 1) - timedelta(seconds=DELAY)
    closed = Counter({k: c for k, c in direct.items() if k[0] + WINDOW <= watermark})
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    committed: Counter[tuple[datetime, int]] = Counter()
    for row in table.to_pylist():
        start = row["window_start"] if row["window_start"].tzinfo else row["window_start"].replace(tzinfo=UTC)
        assert (start, row["key"]) not in committed, "a window was emitted twice"
        committed[(start, row["key"])] = row["count"]
    slow = sum(c for (start, _), c in closed.items() if start < T0)
    assert committed == closed, (f"{sum((closed - committed).values())} records missing from committed windows, "
                                 f"{sum((committed - closed).values())} extra")
    print(f"\nKafka alignment: {len(closed)} windows equal ({slow} records of the lagging partition among them); "
          f"late rows dropped {late}; partition 0 paused in "
          f"{sum(1 for r in history if f'{topic}:0' in r.paused)} of {len(history)} planned batches")
