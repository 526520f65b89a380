"""The source registry: the runtime's only knowledge of source types."""

from __future__ import annotations

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.sources.registry import kind_named, reached, registered_types, source_kind
from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec


def test_each_source_type_has_a_kind() -> None:
    generator = GeneratorSourceSpec(type="generator", name="events", partitions=2, records_per_partition=10)
    kafka = KafkaSourceSpec(type="kafka", name="orders", bootstrap_servers="127.0.0.1:9", topics=["t"])
    assert registered_types() == ["channel", "generator", "kafka", "spark_kafka"]
    assert source_kind(generator).format == "barrierflow_generator"
    assert source_kind(kafka).format == "barrierflow_kafka" and source_kind(kafka).jvm_set is None
    connector = kafka.model_copy(update={"reader": "spark"})
    assert source_kind(connector).type == "spark_kafka" and source_kind(connector).jvm_set == "spark-kafka"
    assert source_kind(connector).read is not None and source_kind(kafka).read is None
    assert kind_named("channel").format == "barrierflow_channel"
    assert source_kind(generator).bounded_end(generator) == {"0": 10, "1": 10}
    assert kind_named("channel").bounded_end(kafka) is None  # channels never end; their sources do
    # (a Kafka topic's bounded end is its end offsets now: tests/sources/test_kafka_source.py)
    times = source_kind(generator).event_times(generator, "file:///unused", {"0": 5, "1": 0})
    assert set(times) == {"0", "1"} and times["0"] is not None


def test_offsets_carry_the_attempt_only_when_set() -> None:
    plain = SourceOffset({"0": 3}, barrier=2)
    assert plain.to_json() == {"partitions": {"0": 3}, "barrier": 2}  # as before attempts existed
    again = SourceOffset.from_json({"partitions": {"0": 3}, "barrier": 2, "attempt": 1, "x": 1})
    assert again.attempt == 1 and again.extra == {"x": 1}
    assert again.to_json() == {"partitions": {"0": 3}, "barrier": 2, "attempt": 1, "x": 1}


def test_an_end_is_reached_when_every_partition_is_at_or_past_it() -> None:
    assert reached({"a:0": 5, "a:1": 7}, {"a:0": 5, "a:1": 6})  # a topic may grow after the run started
    assert not reached({"a:0": 5, "a:1": 5}, {"a:0": 5, "a:1": 6})
    assert not reached({"a:0": 5}, {"a:0": 5, "a:1": 1}) and not reached(None, {"a:0": 0})
    assert reached({}, {})
