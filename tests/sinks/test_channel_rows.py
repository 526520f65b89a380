"""The channel writer's pure parts (no Spark, no broker): its JSON fast path means what the
Kafka sink's encoding means, its keys are the Kafka sink's keys, and a task facing a broker
that does not answer fails with a SinkError naming the stage, topic and servers."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.errors import SinkError
from barrierflow.kafka_io import ProducerSettings
from barrierflow.sinks.channel import ChannelTask, ChannelWriter
from barrierflow.sinks.json_rows import encode_keys, encode_values, is_fast
from barrierflow.sinks.kafka import encode_key, encode_value


def _decoded(value: bytes) -> dict[str, Any]:
    """A JSON object with its timestamps parsed (the fast path writes ``Z`` for ``+00:00``)."""
    out = json.loads(value)
    for name, item in out.items():
        if isinstance(item, str) and "T" in item and item[:4].isdigit():
            out[name] = datetime.fromisoformat(item)
    return out


def test_the_fast_path_means_what_the_kafka_sinks_encoding_means() -> None:
    batch = pa.RecordBatch.from_pydict({
        "n": pa.array([1, None, -(2**63)], type=pa.int64()),
        "small": pa.array([1, 2, 3], type=pa.int8()),
        "s": ["a\n\"b\"", "é\u2028", None],
        "ok": [True, False, None],
        "x": [0.1, 1e20, None],
        "f": pa.array([0.5, 1.25, -3.0], type=pa.float32()),
        "at": pa.array([datetime(2024, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC), None,
                        datetime(1970, 1, 1, tzinfo=UTC)], type=pa.timestamp("us", tz="UTC")),
        "day": pa.array([date(2024, 2, 29), None, date(1, 1, 1)], type=pa.date32()),
        "nothing": pa.nulls(3),
    })
    assert is_fast(batch)
    reference = [encode_value(row) for row in batch.to_pylist()]
    fast = encode_values(batch)
    assert [_decoded(v) for v in fast] == [_decoded(v) for v in reference]


@pytest.mark.parametrize("column", [
    pa.array([1.0, float("nan"), float("inf")]),  # non-finite floats: "NaN", "Infinity" as Spark's to_json
    pa.array([Decimal("1.10"), None, Decimal("-2")]),
    pa.array([b"\x00\xff", None, b""]),
    pa.array([[1, 2], [], None]),
])
def test_other_types_are_encoded_exactly_as_the_kafka_sink_does(column: pa.Array) -> None:
    batch = pa.RecordBatch.from_pydict({"k": [1, 2, 3], "v": column})
    assert not is_fast(batch)
    assert encode_values(batch) == [encode_value(row) for row in batch.to_pylist()]


@pytest.mark.parametrize("column", [
    pa.array([7, None, -1], type=pa.int32()), pa.array(["a", None, "é"]), pa.array([True, False, None]),
    pa.array([1.5, 2.0, None]),
])
def test_keys_are_the_kafka_sinks_keys(column: pa.Array) -> None:
    assert encode_keys(column) == [encode_key(v) for v in column.to_pylist()]


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once it is closed


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
    assert "3 records sent" in message and "check that the brokers" in message, message
    assert time.monotonic() - began < 15  # bounded: the delivery timeout plus a margin


def test_the_driver_facing_a_dead_broker_fails_with_a_sink_error(tmp_path: Path) -> None:
    servers = _closed_port()
    writer = ChannelWriter(servers=servers, topic="ab", stage="gen", attempt=0, spark_checkpoint=tmp_path,
                           delivery_timeout=1.0)
    with pytest.raises(SinkError, match=r"stage 'gen': connecting to channel topic 'ab' on 127\.0\.0\.1:"):
        writer(None, 0)
