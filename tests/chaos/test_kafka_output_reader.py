"""chaos reads a Kafka sink's output with kafka-python (the sink produces with confluent-kafka):
committed records count, records of aborted transactions never do; a row is the record's key,
partition and value."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml
from barrierflow.chaos.outputs import canonical, read_output
from barrierflow.chaos.runner import ChaosOptions, ChaosRunner
from barrierflow.chaos.scratch import ScratchOutput, nothing_to_compare
from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings
from barrierflow.spec.models import KafkaSinkSpec

from tests.support.kafka_broker import KafkaEndpoint, create_topic, produce

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


def test_a_kafka_sources_input_is_counted_from_its_starting_offsets(kafka_endpoint: KafkaEndpoint,
                                                                     tmp_path: Path) -> None:
    """What "nothing to compare" reports as a Kafka source's input: the records from its start
    (earliest, or fixed offsets) to the end offsets chaos saw before the reference run."""
    topic = f"chaos-in-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [(0, None, b"{}", None)] * 10 + [(1, None, b"{}", None)] * 4)
    counts = []
    for starting_offsets in ("earliest", {topic: {"0": 10, "1": -2}}, {topic: {"0": 10, "1": 4}}):
        spec = {"version": 1, "name": "orders", "work_dir": str(tmp_path / "work"),
                "sources": [{"name": "in", "type": "kafka", "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                             "topics": [topic], "starting_offsets": starting_offsets}],
                "transformation": {"function": "barrierflow.transforms.projection:project"},
                "sinks": [{"name": "lake", "type": "parquet", "path": f"file://{tmp_path / 'lake'}"}],
                "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}}
        path = tmp_path / "orders.yaml"
        path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        runner = ChaosRunner(path, ChaosOptions(kills=1))
        counts.append(runner._input_counts(runner._end_offsets())[0])
    assert [c.records for c in counts] == [14, 4, 0]
    assert counts[2].how == f"{topic}:0 offsets 10-10, {topic}:1 offsets 4-4"
    assert "Why: the sources held no records to read (Kafka in: 0" in nothing_to_compare(counts[2:], {}, 0)
