"""The channel writer's pure parts (no Spark, no broker): its keys are the Kafka sink's keys and
pick each row's partition (once per distinct key; null keys round-robin), and a task facing a
broker that does not answer fails with a SinkError naming the stage, topic and servers."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from barrierflow.errors import SinkError
from barrierflow.kafka_io import ProducerSettings
from barrierflow.local_ports import free_port
from barrierflow.sinks.channel import ChannelTask, ChannelWriter, partition_targets
from barrierflow.sinks.json_rows import encode_key, encode_keys


@pytest.mark.parametrize("column", [
    pa.array([7, None, -1], type=pa.int32()), pa.array(["a", None, "é"]), pa.array([True, False, None]),
    pa.array([1.5, 2.0, None]),
])
def test_keys_are_the_kafka_sinks_keys(column: pa.Array) -> None:
    assert encode_keys(column) == [encode_key(v) for v in column.to_pylist()]


def test_each_row_goes_to_the_partition_of_its_key_and_null_keys_round_robin() -> None:
    keys = pa.array([5, None, 5, 12, None, 7, 12, None], type=pa.int64())
    batch = pa.RecordBatch.from_pydict({"key": keys, "n": list(range(8))})
    partitions = (0, 1, 2)
    targets = partition_targets(batch, partitions, "key", 4).tolist()
    for i, key in enumerate(keys.to_pylist()):
        want = (4 + i) % 3 if key is None else zlib.crc32(str(key).encode()) % 3
        assert targets[i] == want, (i, key)
    assert partition_targets(batch, partitions, None, 1).tolist() == [(1 + i) % 3 for i in range(8)]
    text = pa.RecordBatch.from_pydict({"key": ["a", "é", None]})
    assert partition_targets(text, (3, 9), "key", 0).tolist() == [
        (3, 9)[zlib.crc32(b"a") % 2], (3, 9)[zlib.crc32("é".encode()) % 2], 3]  # null: row 2 round-robin


def _closed_port() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


def test_a_task_facing_a_dead_broker_fails_with_a_sink_error_naming_stage_topic_and_servers() -> None:
    servers = _closed_port()
    task = ChannelTask(topic="ab", stage="gen", attempt=0, batch_id=3, partitions=(0, 1),
                       settings=ProducerSettings(servers=servers, delivery_timeout=1.0))
    batch = pa.RecordBatch.from_pydict({"key": [1, 2, 3], "value": [4, 5, 6]})
    began = time.monotonic()
    with pytest.raises(SinkError) as failure:
        list(task(iter([batch])))
    message = str(failure.value)
    assert "stage 'gen'" in message and "channel topic 'ab'" in message and servers in message
    assert "2 records sent" in message and "check that the brokers" in message, message
    assert time.monotonic() - began < 15  # bounded: the delivery timeout plus a margin


def test_the_driver_facing_a_dead_broker_fails_with_a_sink_error(tmp_path: Path) -> None:
    servers = _closed_port()
    writer = ChannelWriter(servers=servers, topic="ab", stage="gen", attempt=0, spark_checkpoint=tmp_path,
                           delivery_timeout=1.0)
    with pytest.raises(SinkError, match=r"stage 'gen': connecting to channel topic 'ab' on 127\.0\.0\.1:"):
        writer(None, 0)
