"""The transactional producer against the tests' Apache Kafka broker (or an external Kafka
through BARRIERFLOW_TEST_KAFKA_BOOTSTRAP), read back by the other client (kafka-python)."""

from __future__ import annotations

import time
import uuid

import pytest
from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings, TransactionError
from barrierflow.local_ports import free_port
from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2

from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = pytest.mark.kafka


def _read(endpoint: KafkaEndpoint, topic: str, partitions: int, isolation: str) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` a consumer with ``isolation`` sees: (partition, offset, value)."""
    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.partition, r.offset, r.value) for r in records]
        return sorted(out)
    finally:
        consumer.close()


def _producer(endpoint: KafkaEndpoint, txn_id: str, timeout: float = 10.0) -> TransactionalProducer:
    return TransactionalProducer(TransactionalSettings(servers=endpoint.bootstrap_servers, transactional_id=txn_id,
                                                       timeout=timeout))


def test_committed_records_become_visible_with_their_spans_and_aborted_ones_never(
        kafka_endpoint: KafkaEndpoint) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 3)
    producer = _producer(kafka_endpoint, f"t-{uuid.uuid4().hex[:8]}")
    try:
        producer.begin()
        for i in range(3000):
            producer.send(topic, f"c{i}".encode(), key=f"k{i % 50}".encode(), headers=[("h", b"1")])
        spans = producer.settle()
        assert _read(kafka_endpoint, topic, 3, "read_committed") == []  # not before the commit
        producer.commit()
        producer.begin()
        for i in range(500):
            producer.send(topic, f"a{i}".encode(), key=f"k{i % 50}".encode())
        producer.settle()
        producer.abort()
    finally:
        producer.close()
    committed = _read(kafka_endpoint, topic, 3, "read_committed")
    assert sorted(v for _, _, v in committed) == sorted(f"c{i}".encode() for i in range(3000))
    for partition, (first, last) in spans.items():
        offsets = [o for p, o, _ in committed if p == partition]
        assert (min(offsets), max(offsets)) == (first, last)
    assert len(_read(kafka_endpoint, topic, 3, "read_uncommitted")) == 3500  # the aborted ones are in the log


def test_keys_land_where_the_java_and_kafka_python_partitioner_puts_them(kafka_endpoint: KafkaEndpoint) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 4)
    producer = _producer(kafka_endpoint, f"t-{uuid.uuid4().hex[:8]}")
    try:
        producer.begin()
        for i in range(200):
            producer.send(topic, str(i).encode(), key=f"key-{i}".encode())
        producer.settle()
        producer.commit()
    finally:
        producer.close()
    seen = _read(kafka_endpoint, topic, 4, "read_committed")
    assert len(seen) == 200
    for partition, _, value in seen:  # kafka-python's DefaultPartitioner, the Java client's rule
        assert partition == (murmur2(f"key-{int(value)}".encode()) & 0x7FFFFFFF) % 4, value


def test_a_newer_producer_of_the_same_id_fences_the_older_and_aborts_its_transaction(
        kafka_endpoint: KafkaEndpoint) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)
    txn_id = f"t-{uuid.uuid4().hex[:8]}"
    zombie = _producer(kafka_endpoint, txn_id)
    zombie.begin()
    zombie.send(topic, b"zombie")
    zombie.settle()
    newer = _producer(kafka_endpoint, txn_id)  # init_transactions fences the zombie
    try:
        with pytest.raises(TransactionError) as failed:
            zombie.send(topic, b"late")
            zombie.settle()
            zombie.commit()
        assert failed.value.kind == "fenced", failed.value
        assert txn_id in str(failed.value) or kafka_endpoint.bootstrap_servers in str(failed.value)
        newer.begin()
        newer.send(topic, b"newer")
        newer.settle()
        newer.commit()
    finally:
        zombie.close()
        newer.close()
    assert [v for _, _, v in _read(kafka_endpoint, topic, 1, "read_committed")] == [b"newer"]


def test_a_dead_broker_is_unreachable_within_the_timeout() -> None:
    servers = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(TransactionError) as failed:
        TransactionalProducer(TransactionalSettings(servers=servers, transactional_id="t-dead", timeout=2.0))
    assert failed.value.kind == "unreachable", failed.value
    assert servers in str(failed.value)
    assert time.monotonic() - began < 15
