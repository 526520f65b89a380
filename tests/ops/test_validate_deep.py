"""``barrierflow validate --deep``: each rule of docs/writing-pipelines.md that can be checked
before a run is, with exit 2 naming the spec field (single stage and several alike).

The transformations live in a module written into the test's directory (a user's package);
every check runs on the test session's one SparkSession and reads no data: the Kafka sources
name a broker address nothing listens on.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main

pytestmark = [pytest.mark.spark]

USER_MODULE = textwrap.dedent('''
    from pyspark.sql import functions as F


    def minute_sums(df, ctx):
        return (ctx.with_watermark(df)
                .groupBy(F.window(ctx.event_time_column, "1 minute"), "user")
                .agg(F.sum("amount").alias("total")))


    def minute_sums_no_watermark(df, ctx):
        return df.groupBy(F.window("event_time", "1 minute"), "user").agg(F.sum("amount").alias("total"))


    def uses_missing_column(df, ctx):
        return df.select("user", F.col("price") * 2)


    def identity(df, ctx):
        return df.select("key", "value")


    def noisy(df, ctx):
        return df.select("key", F.rand().alias("noise"))


    def breaks(df, ctx):
        raise KeyError("amount_cents")
''')


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of transformations importable as ``<name>`` (unique per test)."""
    name = f"user_transforms_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _kafka_spec(tmp_path: Path, function: str, *, output_mode: str = "append",
                json_fields: dict[str, str] | None = None, event_column: str = "event_time") -> Path:
    data: dict[str, Any] = {
        "name": "payments",
        "sources": [{"type": "kafka", "bootstrap_servers": "127.0.0.1:9", "topics": ["payments"], "format": "json",
                     "json_fields": json_fields or {"user": "string", "amount": "double",
                                                    "event_time": "timestamp"}}],
        "transformation": {"function": function, "output_mode": output_mode},
        "event_time": {"column": event_column, "watermark_delay": "30s"},
        "sinks": [{"type": "postgres", "table": "totals", "mode": "upsert", "key_columns": ["user", "window"]}],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _two_stages(tmp_path: Path, second: str, *, fields: dict[str, str] | None = None) -> Path:
    data = {
        "name": "flow",
        "channels": [{"name": "mid", "partitions": 2}],
        "stages": [
            {"name": "first", "sources": [{"name": "events", "type": "generator", "partitions": 2}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"key": "key", "value": "value"}}},
             "sinks": [{"type": "channel", "channel": "mid", "key_column": "key"}]},
            {"name": "second", "sources": [{"type": "channel", "channel": "mid",
                                            "json_fields": fields or {"key": "long", "value": "long"}}],
             "transformation": {"function": second},
             "sinks": [{"type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
    }
    path = tmp_path / "flow.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_the_checked_input_has_the_columns_the_spark_data_sources_report() -> None:
    """validate --deep builds each stage's input from the registry's row schema: the same
    schema each source's Spark data source reports to a run."""
    import json

    from barrierflow.sources.channel import ChannelDataSource
    from barrierflow.sources.generator import GeneratorDataSource
    from barrierflow.sources.kafka import KafkaDataSource
    from barrierflow.sources.registry import kind_named
    from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec

    generator = GeneratorSourceSpec(type="generator")
    kafka = KafkaSourceSpec(type="kafka", bootstrap_servers="127.0.0.1:9", topics=["t"], format="json",
                            json_fields={"user": "string", "amount": "double"})
    raw = kafka.model_copy(update={"format": "raw", "json_fields": {}})
    for kind, source, data_source in [("generator", generator, GeneratorDataSource), ("kafka", kafka, KafkaDataSource),
                                      ("kafka", raw, KafkaDataSource), ("channel", kafka, ChannelDataSource)]:
        reported = data_source({"spec": json.dumps(source.model_dump(mode="json"))}).schema()
        assert kind_named(kind).row_schema(source) == reported


def _refused(spec: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["validate", "--deep", str(spec)])
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def test_a_windowed_sum_with_watermark_passes_and_prints_its_columns(
        spark: object, tmp_path: Path, user_package: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _kafka_spec(tmp_path, f"{user_package}:minute_sums")
    assert main(["validate", "--deep", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "transformation of payments (checked): (topic, partition, offset, timestamp, user, amount, event_time)" \
        in out
    assert "window struct<start:timestamp,end:timestamp>, user string, total double" in out


def test_missing_module(spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_kafka_spec(tmp_path, "no_such_package.transforms:minute_sums"), capsys)
    assert "- transformation.function: cannot import module 'no_such_package.transforms'" in err


def test_missing_function_in_the_second_stage(spark: object, tmp_path: Path, user_package: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_two_stages(tmp_path, f"{user_package}:no_such_function"), capsys)
    assert f"- stages[1].transformation.function: stage 'second': module '{user_package}' has no callable " \
           "'no_such_function'" in err


def test_event_time_column_not_among_the_fields(spark: object, tmp_path: Path, user_package: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_kafka_spec(tmp_path, f"{user_package}:minute_sums", event_column="ts"), capsys)
    assert "- event_time.column: column 'ts' is not among the columns the source gives (topic string, " \
           "partition int, offset bigint, timestamp timestamp, user string, amount double, event_time timestamp)" in err


def test_a_column_the_function_uses_that_is_not_there(spark: object, tmp_path: Path, user_package: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_kafka_spec(tmp_path, f"{user_package}:uses_missing_column"), capsys)
    assert f"- transformation.function: {user_package}:uses_missing_column does not fit the columns the source " \
           "gives" in err
    assert "`price` cannot be resolved" in err
    assert "Traceback" not in err and "StreamingRelation" not in err


def test_an_exception_in_the_function_is_named(spark: object, tmp_path: Path, user_package: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_kafka_spec(tmp_path, f"{user_package}:breaks"), capsys)
    assert f"- transformation.function: {user_package}:breaks raised KeyError when called" in err
    assert "'amount_cents'" in err


def test_windowed_aggregation_without_watermark_in_append_mode(spark: object, tmp_path: Path, user_package: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_kafka_spec(tmp_path, f"{user_package}:minute_sums_no_watermark"), capsys)
    assert "- transformation.output_mode: Spark refuses output mode 'append'" in err
    assert "without watermark" in err and "ctx.with_watermark(df)" in err
    # the same function in update mode is what Spark accepts
    spec = _kafka_spec(tmp_path, f"{user_package}:minute_sums_no_watermark", output_mode="update")
    assert main(["validate", "--deep", str(spec)]) == 0, capsys.readouterr().err


def test_a_json_field_named_like_a_kafka_column_is_refused_without_deep(
        tmp_path: Path, user_package: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _kafka_spec(tmp_path, f"{user_package}:minute_sums",
                       json_fields={"user": "string", "amount": "double", "timestamp": "timestamp"},
                       event_column="timestamp")
    assert main(["validate", str(spec)]) == 2
    assert "- sources.0.kafka.json_fields: json_fields ['timestamp'] collide with the columns every Kafka and " \
           "channel row has ['topic', 'partition', 'offset', 'timestamp']" in capsys.readouterr().err
    channel = _two_stages(tmp_path, f"{user_package}:identity", fields={"key": "long", "offset": "long"})
    assert main(["validate", str(channel)]) == 2
    assert "- stages.1.sources.0.channel.json_fields: json_fields ['offset'] collide" in capsys.readouterr().err


def test_an_upsert_key_the_output_does_not_have(spark: object, tmp_path: Path, user_package: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    spec = _kafka_spec(tmp_path, f"{user_package}:minute_sums")
    data = yaml.safe_load(spec.read_text())
    data["sinks"][0]["key_columns"] = ["user", "window_start"]
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    err = _refused(spec, capsys)
    assert "- sinks.key_columns: key column 'window_start' is not among the columns" in err


def test_a_channel_field_the_writing_stage_does_not_write(spark: object, tmp_path: Path, user_package: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    spec = _two_stages(tmp_path, f"{user_package}:identity", fields={"key": "long", "value": "long", "user": "string"})
    err = _refused(spec, capsys)
    assert "- stages[1].sources[0].json_fields: stage 'second' reads fields ['user'] from channel 'mid', but stage " \
           "'first' writes only the columns key bigint, value bigint" in err


def test_a_nondeterministic_function_declared_deterministic(spark: object, tmp_path: Path, user_package: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(_two_stages(tmp_path, f"{user_package}:noisy"), capsys)
    assert "- stages[1].transformation.deterministic: stage 'second':" in err
    assert "nondeterministic expression" in err


def test_a_package_shipped_by_py_packages_imports_as_in_a_run(spark: object, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A package that is only listed in spark.py_packages (not installed, not on sys.path)."""
    name = f"shipped_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / "code" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "transform.py").write_text(USER_MODULE, encoding="utf-8")
    spec = _kafka_spec(tmp_path, f"{name}.transform:minute_sums")
    data = yaml.safe_load(spec.read_text())
    data["spark"] = {"py_packages": [str(package)]}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["validate", "--deep", str(spec)]) == 0, capsys.readouterr().err


def test_the_deep_check_leaves_pysparks_query_context_loggers_working() -> None:
    """Silencing PySpark's query-context loggers must not create them as standard loggers: PySpark
    logs every later AnalysisException on them with keywords only its own logger class takes
    (a standard one turned each such error into a TypeError). In a fresh interpreter, where the
    check is the first to ask for them."""
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from pyspark.logger import PySparkLogger\n"
        "from barrierflow.runtime.transform_check import _QUERY_CONTEXT_LOGGERS, _quiet_query_context\n"
        "with _quiet_query_context():\n"
        "    pass\n"
        "for name in _QUERY_CONTEXT_LOGGERS:\n"
        "    logger = logging.getLogger(name)\n"
        "    assert isinstance(logger, PySparkLogger) and not logger.disabled, (name, type(logger))\n"
        "    logger.error('checked', errorClass='X')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
