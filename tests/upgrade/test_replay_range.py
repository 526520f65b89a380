"""Where a rebuild's replay of a Kafka-fed stage starts, without a broker: the event time the
new state needs records from, the pipeline's first offsets its spec tells, and the savepoint's
offsets in the form ``starting_offsets`` takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from barrierflow.kafka_io.partition_ids import starting_offsets_form
from barrierflow.spec.models import KafkaSourceSpec
from barrierflow.upgrade.replay_range import PartitionRange, first_offsets, partition_range, replay_since_ms


def kafka(starting: object) -> KafkaSourceSpec:
    return KafkaSourceSpec.model_validate({"name": "payments", "type": "kafka", "bootstrap_servers": "b:9092",
                                           "topics": ["clicks"], "starting_offsets": starting})


def test_a_windowed_aggregation_replays_from_its_oldest_open_window() -> None:
    window = [{"operator": "EventTimeWatermark", "watermark": "event_time delayed by 10 seconds"},
              {"operator": "Aggregate", "window": "120 s", "grouping keys": ["window: struct", "user_id: string"]}]
    assert replay_since_ms(window, 1_000_000) == 1_000_000 - 120_000
    sliding = [{"operator": "Aggregate", "window": "10 s, 60 s", "grouping keys": []}]  # slide, length
    assert replay_since_ms(sliding, 1_000_000) == 1_000_000 - 60_000


def test_state_that_is_not_windowed_replays_everything() -> None:
    window = {"operator": "Aggregate", "window": "60 s", "grouping keys": ["window: struct"]}
    assert replay_since_ms([{"operator": "Aggregate", "grouping keys": ["user_id: string"]}], 1_000_000) is None
    assert replay_since_ms([window, {"operator": "Deduplicate", "keys": ["id: string"]}], 1_000_000) is None
    session = {"operator": "Aggregate", "window": "5 s", "grouping keys": ["session_window(event_time, 5 s)"]}
    assert replay_since_ms([session], 1_000_000) is None
    assert replay_since_ms([], 1_000_000) is None


def test_the_pipelines_first_offsets_as_its_spec_tells_them() -> None:
    partitions = ["clicks:0", "clicks:1"]
    assert first_offsets(kafka("earliest"), partitions) == {"clicks:0": 0, "clicks:1": 0}
    assert first_offsets(kafka("latest"), partitions) == {"clicks:0": None, "clicks:1": None}
    assert first_offsets(kafka({"clicks": {"0": 40, "1": -1}}), partitions) == {"clicks:0": 40, "clicks:1": None}
    assert first_offsets(kafka({"clicks": {"0": -2}}), partitions) == {"clicks:0": 0, "clicks:1": 0}


def test_offsets_in_the_starting_offsets_form() -> None:
    form = starting_offsets_form({"clicks:10": 5, "clicks:2": 7, "a:b:0": 1})
    assert form == {"a:b": {"0": 1}, "clicks": {"2": 7, "10": 5}}
    assert list(form["clicks"]) == ["2", "10"]  # partitions in number order
    assert kafka(form).starting_offsets == form  # what the Kafka source's field takes


def test_a_partition_names_what_is_needed_and_retained() -> None:
    assert PartitionRange("clicks:0", 76, 0, 120, True).describe() == (
        "clicks:0: oldest offset needed 76, oldest retained 0, savepoint at 120")
    assert "oldest offset needed below 81 (the broker deleted" in PartitionRange("clicks:0", None, 81, 120,
                                                                                 False).describe()


def test_which_kafka_fed_stages_can_be_rebuilt(tmp_path: Path) -> None:
    """barrierflow's Kafka reader with RocksDB state replays; Spark's connector and the
    HDFS-backed state store do not (each refusal names why); nothing connects."""
    from barrierflow.pipeline.model import open_pipeline
    from barrierflow.upgrade.rebuild import rebuild_refusal

    def stage(reader: str, store: str) -> Any:
        path = tmp_path / f"{reader}-{store}.yaml"
        path.write_text(yaml.safe_dump({
            "version": 1, "name": "clicks", "work_dir": str(tmp_path / "work"),
            "sources": [{"name": "payments", "type": "kafka", "bootstrap_servers": "b:9092", "topics": ["clicks"],
                         "reader": reader}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
            "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}, "spark": {"state_store": store}}),
            encoding="utf-8")
        return open_pipeline(path).stages[0]

    assert rebuild_refusal(stage("python", "rocksdb")) is None
    assert "not yet supported for reader: spark" in str(rebuild_refusal(stage("spark", "rocksdb")))
    assert "spark.state_store: rocksdb" in str(rebuild_refusal(stage("python", "hdfs")))


def test_an_unknown_first_offset_says_why() -> None:
    latest = PartitionRange("clicks:0", None, 0, 120, False, "the pipeline started at starting_offsets latest, "
                                                             "which no checkpoint records")
    assert latest.describe() == ("clicks:0: oldest offset needed unknown (the pipeline started at starting_offsets "
                                 "latest, which no checkpoint records), oldest retained 0, savepoint at 120")


def test_a_partitions_replay_is_covered_while_the_broker_holds_its_start() -> None:
    # windowed: offsets-for-times found offset 76; the broker holds from 0 (or 50): replay 76..120
    assert partition_range("c:0", 120, 0, 0, 76, windowed=True) == PartitionRange("c:0", 76, 0, 120, True)
    assert partition_range("c:0", 120, 50, 0, 76, windowed=True).covered
    # nothing at or after the time: nothing before the savepoint is needed
    assert partition_range("c:0", 120, 0, 0, None, windowed=True) == PartitionRange("c:0", 120, 0, 120, True)
    # the oldest retained record is already new enough: what was deleted before it may be needed
    deleted = partition_range("c:0", 120, 81, 0, 81, windowed=True)
    assert not deleted.covered and deleted.needed is None and deleted.retained == 81
    # ... unless the pipeline began there (nothing it read was deleted)
    assert partition_range("c:0", 120, 81, 81, 81, windowed=True) == PartitionRange("c:0", 81, 81, 120, True)
    # never before the pipeline's first offset (records it never read)
    assert partition_range("c:0", 120, 0, 40, 10, windowed=True) == PartitionRange("c:0", 40, 0, 120, True)
    # every record deleted up to the savepoint
    assert not partition_range("c:0", 120, 120, 0, None, windowed=True).covered


def test_state_that_is_not_windowed_needs_the_pipelines_first_record() -> None:
    assert partition_range("c:0", 120, 0, 0, None, windowed=False) == PartitionRange("c:0", 0, 0, 120, True)
    assert partition_range("c:0", 120, 5, 0, None, windowed=False) == PartitionRange("c:0", 0, 5, 120, False)
    assert partition_range("c:0", 120, 30, 40, None, windowed=False).covered
    latest = partition_range("c:0", 120, 0, None, None, windowed=False)
    assert not latest.covered and "starting_offsets latest" in latest.describe()
