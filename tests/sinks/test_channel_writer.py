"""The channel writer on the shared SparkSession and a real broker: each Spark task produces
its own rows (several tasks per micro-batch), the driver appends the barrier to every channel
partition only after every task's records were acknowledged, keyed rows keep their partition,
and a 20,000-row micro-batch goes through the channel and is read by the channel source once."""

from __future__ import annotations

import json
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
from barrierflow.barriers.records import decode_barrier, record_attempt
from barrierflow.kafka_io.row_batches import decode, is_row_batch, rows_in
from barrierflow.sinks.channel import ChannelWriter
from barrierflow.sources.channel import ChannelStreamReader
from barrierflow.spec.models import KafkaSourceSpec
from pyspark.sql.datasource import InputPartition

from tests.support.kafka_broker import KafkaEndpoint, create_topic, partition_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


#: Checkpoint -> its trigger time (epoch ms) in the offsets _plan writes.
TRIGGERED_MS = {1: 1_795_000_000_000, 2: 1_795_000_001_000}


def _plan(spark_checkpoint: Path, batch_id: int, barrier: int) -> None:
    """``offsets/<batch_id>`` as a source stage's planner writes it, carrying ``barrier`` and
    its trigger time."""
    path = spark_checkpoint / "offsets" / str(batch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    offset = {'partitions': {'g:0': batch_id}, 'barrier': barrier, 'barrier_triggered_ms': TRIGGERED_MS[barrier]}
    path.write_text(f"v1\n{{}}\n{json.dumps(offset)}\n")


def test_a_barrier_batch_written_by_four_tasks_puts_the_barrier_after_every_record_of_its_epoch(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """Three micro-batches of 4 Spark partitions each (the tasks produce concurrently, keyed):
    batch 0 closes epoch 1, batch 1 is in epoch 2, batch 2 closes epoch 2. On both channel
    partitions: every row of epoch 1 before barrier 1, every row of epoch 2 between barriers 1
    and 2; each row once, on partition crc32(key) % 2, in row-batch records with their attempt
    header and their row count."""
    from pyspark.sql import functions as F

    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    checkpoint = tmp_path / "spark-checkpoint"
    writer = ChannelWriter(servers=kafka_endpoint.bootstrap_servers, topic=topic, stage="up", attempt=3,
                           spark_checkpoint=checkpoint, key_column="key")
    bounds = {0: (0, 400, 1), 1: (400, 800, 1), 2: (800, 1200, 2)}  # batch -> rows [first, end), barrier
    try:
        for batch_id, (first, end, barrier) in bounds.items():
            _plan(checkpoint, batch_id, barrier)
            rows = spark.range(first, end, numPartitions=4)
            writer(rows.select(F.col("id").alias("n"), (F.col("id") % 13).alias("key")), batch_id)
    finally:
        writer.close()
    assert writer.written == 1200 and writer.barriers == [1, 2]
    seen: list[int] = []
    for partition in range(2):
        epoch = 1
        for record in partition_records(kafka_endpoint, topic, partition):
            assert record_attempt(record.headers) == 3
            marker = decode_barrier(record.headers)
            if marker is not None:
                assert (marker.checkpoint_id, marker.attempt, marker.stage) == (epoch, 3, "up")
                assert marker.triggered_ms == TRIGGERED_MS[epoch]  # from the barrier batch's offsets
                epoch += 1
                continue
            assert is_row_batch(record.value)
            rows = decode(record.value).to_pylist()
            assert rows_in(record.headers) == len(rows) > 0
            for row in rows:
                assert epoch == (1 if row["n"] < 400 else 2), (partition, row, epoch)  # never past its barrier
                assert zlib.crc32(str(row["key"]).encode()) % 2 == partition
                seen.append(row["n"])
        assert epoch == 3, f"partition {partition} lacks a barrier"
    assert sorted(seen) == list(range(1200))


def test_a_20000_row_micro_batch_goes_through_a_channel_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """One micro-batch of 20,000 rows (the size that failed after about 60 s with the old
    driver-side writer) closes epoch 1; the channel source plans one batch up to the barrier
    on each partition and reads every row exactly once."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    checkpoint = tmp_path / "spark-checkpoint"
    _plan(checkpoint, 0, 1)
    writer = ChannelWriter(servers=kafka_endpoint.bootstrap_servers, topic=topic, stage="up", attempt=0,
                           spark_checkpoint=checkpoint)
    try:
        writer(spark.range(0, 20_000, numPartitions=2).withColumnRenamed("id", "n"), 0)
    finally:
        writer.close()
    assert writer.written == 20_000 and writer.barriers == [1]

    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=kafka_endpoint.bootstrap_servers,
                           topics=[topic], format="json", json_fields={"n": "long"}, max_records_per_batch=30_000,
                           poll_timeout=5)
    source = ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                  "alignment": json.dumps({"mode": "aligned"})})
    try:
        start = source.initialOffset()
        end = source.latestOffset(start, None)
        assert end["barrier"] == 1  # one batch, up to and including barrier 1 on both partitions
        rows = [r["n"] for partition in source.partitions(start, end)
                for batch in source.read(partition) for r in batch.to_pylist()]
        assert isinstance(source.partitions(start, end)[0], InputPartition)
    finally:
        source.stop()
    assert sorted(rows) == list(range(20_000))
