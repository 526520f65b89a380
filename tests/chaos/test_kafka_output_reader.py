"""chaos reads a Kafka sink's output with kafka-python (the sink produces with confluent-kafka):
committed records count, records of aborted transactions never do; a row is the record's key,
partition and value."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest
from barrierflow.chaos.outputs import canonical, read_output
from barrierflow.chaos.scratch import ScratchOutput
from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings
from barrierflow.spec.models import KafkaSinkSpec

from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = pytest.mark.kafka


def test_the_reader_counts_committed_records_and_skips_aborted_ones(kafka_endpoint: KafkaEndpoint) -> None:
    topic = f"chaos-out-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    producer = TransactionalProducer(TransactionalSettings(servers=kafka_endpoint.bootstrap_servers,
                                                           transactional_id=f"t-{uuid.uuid4().hex[:8]}"))
    try:
        for commit, rows in ((True, range(0, 300)), (False, range(300, 400)), (True, range(0, 50))):
            producer.begin()
            for i in rows:
                producer.send(topic, json.dumps({"k": i % 7, "n": i}).encode(), key=str(i % 7).encode())
            producer.settle()
            (producer.commit if commit else producer.abort)()
    finally:
        producer.close()
    sink = KafkaSinkSpec.model_validate({"name": "k", "type": "kafka", "topic": topic,
                                         "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                                         "commit_marker_topic": "unused"})
    rows = read_output(ScratchOutput(stage="main", sink="k", kind="kafka", target=topic, original=topic), sink, "p")
    read = [(json.loads(row), n) for row, n in rows.items()]
    # each row is the record's key, partition and value; a key's records share one partition
    assert Counter({canonical(r["value"]): n for r, n in read}) == Counter(
        {canonical({"k": i % 7, "n": i}): 2 if i < 50 else 1 for i in range(300)})
    assert all(r["key"] == str(r["value"]["k"]) for r, _ in read)
    partitions = {(r["key"], r["partition"]) for r, _ in read}
    assert len(partitions) == 7 and {p for _, p in partitions} <= {0, 1}
