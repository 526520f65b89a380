"""A Kafka source read by Spark's connector (``reader: spark``), without Spark or a broker: what
the spec refuses (features that need barrierflow's planner), how the connector's offset line and
the barrier-only line merge into one barrierflow offset, and the connector's options (starting
offsets, batch cap, read_committed, the ``client`` block as Java client settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SourceError, SpecError, UserInputError
from barrierflow.pipeline.model import open_pipeline
from barrierflow.sources.registry import jvm_sets, source_kind
from barrierflow.sources.spark_kafka import connector_options, starting_offsets
from barrierflow.spark.offset_log import merge_connector_offsets, parse_offset_lines
from barrierflow.spec import load_spec
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.models import KafkaSourceSpec

from tests.pipeline_specs import spec_dict, write_spec

SECRET = "pw-S3CR3T-spark"


def _kafka(**extra: Any) -> dict[str, Any]:
    return {"name": "events", "type": "kafka", "reader": "spark", "bootstrap_servers": "b1:9092,b2:9092",
            "topics": ["orders", "refunds"], **extra}


def _spec(tmp_path: Path, **top: Any) -> dict[str, Any]:
    data = spec_dict(tmp_path)
    data["sources"] = [_kafka()]
    data.update(top)
    return data


def _refusal(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path, data))
    return str(info.value)


def test_the_reader_picks_the_source_kind_and_its_jars(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, _spec(tmp_path)))
    assert source_kind(spec.source).type == "spark_kafka" and source_kind(spec.source).jvm_set == "spark-kafka"
    assert jvm_sets(list(spec.sources)) == ["spark-kafka"]
    python = KafkaSourceSpec.model_validate({**_kafka(), "reader": "python"})
    assert source_kind(python).type == "kafka" and jvm_sets([python]) == []
    assert open_pipeline(str(write_spec(tmp_path, _spec(tmp_path)))).stages[0].source_type == "spark_kafka"


@pytest.mark.parametrize(("field", "value", "named"), [
    ("event_time", {"column": "timestamp", "watermark_delay": "1s", "alignment": {"max_drift": "2s"}},
     "event_time.alignment"),
    ("event_time", {"column": "timestamp", "watermark_delay": "1s", "idle_timeout": "5s"}, "event_time.idle_timeout"),
    ("trigger", {"interval": "1s", "target_batch_duration": "2s"}, "trigger.target_batch_duration"),
])
def test_what_needs_barrierflows_planner_is_refused_naming_the_field_and_the_fix(
        tmp_path: Path, field: str, value: dict[str, Any], named: str) -> None:
    message = _refusal(tmp_path, _spec(tmp_path, **{field: value}))
    assert named in message and "sources.0 ('events', reader: spark)" in message
    assert "set reader: python on that source, or remove the setting" in message


def test_synchronous_upload_and_topic_fields_are_refused(tmp_path: Path) -> None:
    data = _spec(tmp_path)
    data["checkpoint"]["synchronous_upload"] = True
    assert "checkpoint.synchronous_upload" in _refusal(tmp_path, data)
    data = _spec(tmp_path)
    data["sources"] = [_kafka(format="json", json_fields={"a": "long"}, topic_fields={"orders": ["a"]})]
    assert "topic_fields needs reader 'python'" in _refusal(tmp_path, data)
    # Spark's own watermark needs nothing of the planner
    plain = _spec(tmp_path, event_time={"column": "timestamp", "watermark_delay": "1s"})
    assert load_spec(write_spec(tmp_path, plain)).source.kind == "spark_kafka"


def _staged(tmp_path: Path, first_sources: list[dict[str, Any]]) -> Path:
    data = {
        "version": 1, "name": "sk", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "c", "partitions": 1, "bootstrap": "b1:9092"}],
        "stages": [
            {"name": "a", "sources": first_sources,
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_offset": "offset"}}},
             "sinks": [{"type": "channel", "channel": "c"}]},
            {"name": "b", "sources": [{"type": "channel", "channel": "c", "json_fields": {"src_offset": "long"}}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_offset": "src_offset"}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
    }
    path = tmp_path / "staged.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_stage_of_several_reads_an_external_source_with_the_connector(tmp_path: Path) -> None:
    pipeline = open_pipeline(str(_staged(tmp_path, [_kafka()])))
    assert [s.source_type for s in pipeline.stages] == ["spark_kafka", "channel"]
    with pytest.raises(SpecError, match="reads channels and a Kafka source with reader: spark"):
        load_any_spec(_staged(tmp_path, [_kafka(), {"type": "channel", "channel": "c",
                                                    "json_fields": {"src_offset": "long"}}]))


def test_the_connectors_offset_line_and_the_barrier_line_merge_into_one_offset() -> None:
    connector = {"orders": {"1": 40, "0": 52}, "refunds": {"0": 7}}
    barrier = {"partitions": {}, "barrier": 3, "barrier_triggered_ms": 1700, "connector": "kafka"}
    merged = {"partitions": {"orders:0": 52, "orders:1": 40, "refunds:0": 7}, "barrier": 3,
              "barrier_triggered_ms": 1700, "connector": "kafka"}
    assert merge_connector_offsets([connector, barrier]) == [merged]
    assert merge_connector_offsets([barrier, connector]) == [merged]
    lines = [json.dumps(connector), json.dumps(barrier)]
    assert parse_offset_lines(lines) == [merged]
    # barrierflow's own readers' offsets pass unchanged
    own = [{"partitions": {"orders:0": 5}, "barrier": 2}]
    assert merge_connector_offsets(own) == own and parse_offset_lines(["-"]) == [None]


def test_starting_offsets_name_every_partition_explicit_ones_given_the_rest_earliest() -> None:
    partitions = ["orders:0", "orders:1", "refunds:0"]
    spec = KafkaSourceSpec.model_validate(_kafka(starting_offsets={"orders": {"1": 10}, "refunds": {"0": -1}}))
    assert json.loads(starting_offsets(spec, partitions)) == {"orders": {"0": -2, "1": 10}, "refunds": {"0": -1}}
    assert starting_offsets(KafkaSourceSpec.model_validate(_kafka(starting_offsets="latest")), partitions) == "latest"
    with pytest.raises(SourceError, match="partition orders:7 that does not exist"):
        starting_offsets(KafkaSourceSpec.model_validate(_kafka(starting_offsets={"orders": {"7": 1}})), partitions)
    with pytest.raises(UserInputError, match="names topics \\['other'\\]"):
        starting_offsets(KafkaSourceSpec.model_validate(_kafka(starting_offsets={"other": {"0": 1}})), partitions)
    with pytest.raises(UserInputError, match="starting offset -5 of orders:0 is invalid"):
        starting_offsets(KafkaSourceSpec.model_validate(_kafka(starting_offsets={"orders": {"0": -5}})), partitions)


def test_connector_options_read_committed_capped_short_fetch_wait_large_polls_and_plaintext_by_default() -> None:
    spec = KafkaSourceSpec.model_validate(_kafka(max_records_per_batch=500))
    assert connector_options(spec, ["orders:0", "orders:1", "refunds:0"]) == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092", "subscribe": "orders,refunds", "startingOffsets": "earliest",
        "failOnDataLoss": "true", "kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "1500",
        "includeHeaders": "true", "kafka.fetch.max.wait.ms": "50", "kafka.max.poll.records": "10000",
        "kafka.max.partition.fetch.bytes": str(4 * 1024 * 1024)}



def test_the_client_block_maps_to_the_java_clients_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {}
    for name in ("ca", "cert", "key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(f"-----BEGIN {name.upper()}-----\n", encoding="ascii")
    monkeypatch.setenv("BF_SPARK_KAFKA_PASSWORD", SECRET)
    monkeypatch.setenv("BF_SPARK_KEY_PASSWORD", "key-pw-123")
    spec = KafkaSourceSpec.model_validate(_kafka(format="json", json_fields={"a": "long"}, client={
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": 'al"ice',
        "password": "env:BF_SPARK_KAFKA_PASSWORD", "ssl_cafile": str(files["ca"]), "ssl_certfile": str(files["cert"]),
        "ssl_keyfile": str(files["key"]), "ssl_key_password": "env:BF_SPARK_KEY_PASSWORD",
        "options": {"client.rack": "eu-1a", "ssl.endpoint.identification.algorithm": "none",
                    "socket.keepalive.enable": True, "reconnect.backoff.max.ms": 500}}))
    options = connector_options(spec, ["orders:0", "refunds:0"])
    secured = {k: v for k, v in options.items() if k.startswith("kafka.") and k not in (
        "kafka.bootstrap.servers", "kafka.isolation.level", "kafka.fetch.max.wait.ms", "kafka.max.poll.records",
        "kafka.max.partition.fetch.bytes")}
    assert secured == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  f'username="al\\"ice" password="{SECRET}";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(files["ca"]),
        "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERT-----\n",
        "kafka.ssl.keystore.key": "-----BEGIN KEY-----\n", "kafka.ssl.key.password": "key-pw-123",
        "kafka.client.rack": "eu-1a", "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.reconnect.backoff.max.ms": "500"}
    assert options["includeHeaders"] == "false" and options["maxOffsetsPerTrigger"] == str(2 * 100_000)


def test_spark_submit_is_given_the_connector_jars_in_every_shape(tmp_path: Path) -> None:
    """A driver that spark-submit starts (the Airflow launch) has its class path fixed before the
    job's session could add the connector: the launch passes the installed jars as ``--jars``,
    for the source of one stage and for a stage's source in a pipeline of several; none for a
    pipeline that does not read through the connector."""
    from barrierflow.airflow.launch import PipelineSubmitOperator
    from barrierflow.jvm.classpath import set_jars
    from barrierflow.ops.run import submit_jars

    connector = [str(jar) for jar in set_jars("spark-kafka")]
    assert len(connector) == 4 and all(Path(jar).is_file() for jar in connector)
    one = write_spec(tmp_path, _spec(tmp_path), "one.yaml")
    assert submit_jars(one) == connector
    assert submit_jars(write_spec(tmp_path, spec_dict(tmp_path), "generator.yaml")) == []
    identity = {"function": "barrierflow.transforms.projection:project", "options": {"columns": {"value": "value"}}}
    staged = {"version": 1, "name": "two", "work_dir": str(tmp_path / "work"),
              "channels": [{"name": "ab", "partitions": 1, "bootstrap": "embedded"}],
              "stages": [{"name": "a", "sources": [_kafka()], "transformation": identity,
                          "sinks": [{"type": "channel", "channel": "ab"}]},
                         {"name": "b", "sources": [{"type": "channel", "channel": "ab",
                                                    "json_fields": {"value": "string"}}],
                          "transformation": identity, "sinks": [{"name": "out", "type": "discard"}]}],
              "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}}
    assert submit_jars(write_spec(tmp_path, staged, "two.yaml")) == connector

    launch = PipelineSubmitOperator(task_id="launch", application="job.py", spec_path=str(one), spec_master="local[1]",
                                    recovery_dag_id="barrierflow_recover__t", jars="/opt/extra.jar")
    assert launch._source_jars() == ",".join(["/opt/extra.jar", *connector])
