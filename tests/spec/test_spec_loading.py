"""Spec validation: every error names the file, the field and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.cli.main import main
from barrierflow.errors import SpecError, UserInputError
from barrierflow.spec import load_spec

from tests.pipeline_specs import spec_dict, write_spec

DEMO = Path(__file__).resolve().parents[2] / "include" / "pipelines" / "demo.yaml"


def test_demo_spec_is_valid() -> None:
    spec = load_spec(DEMO)
    assert spec.name == "demo"
    assert spec.checkpoint.storage.startswith("file://")
    assert spec.sink.type == "parquet"
    assert spec.event_time is not None and spec.event_time.watermark_delay == 5.0


def _problems(tmp_path: Path, data: dict) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path, data))
    return info.value


def test_unknown_field_is_named(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"]["intervall"] = "5s"
    err = _problems(tmp_path, data)
    assert ("checkpoint.intervall", err.problems[0][1]) in err.problems
    assert "unknown field" in str(err) and str(tmp_path / "pipeline.yaml") in str(err)


def test_wrong_type_is_named(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"]["max_concurrent"] = "several"
    data["sources"][0]["partitions"] = -3
    err = _problems(tmp_path, data)
    fields = [f for f, _ in err.problems]
    assert "checkpoint.max_concurrent" in fields
    assert any(f.startswith("sources.0") and f.endswith("partitions") for f in fields)


def test_bad_duration_says_what_is_allowed(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"]["interval"] = "soon"
    err = _problems(tmp_path, data)
    assert any(f == "checkpoint.interval" and "'5s'" in m for f, m in err.problems)


def test_missing_storage_is_named(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    del data["checkpoint"]["storage"]
    err = _problems(tmp_path, data)
    assert ("checkpoint.storage", "required field is missing") in err.problems


def test_bad_storage_uri_is_named(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"]["storage"] = "/tmp/no-scheme"
    err = _problems(tmp_path, data)
    assert any(f == "checkpoint.storage" and "file://PATH" in m for f, m in err.problems)


def test_unset_environment_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BF_TEST_UNSET", raising=False)
    data = spec_dict(tmp_path)
    data["checkpoint"]["storage"] = "s3://${BF_TEST_UNSET}/chk"
    err = _problems(tmp_path, data)
    assert any(f == "checkpoint.storage" and "BF_TEST_UNSET" in m for f, m in err.problems)


def test_missing_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(tmp_path / "bad.yaml")
    assert issubclass(SpecError, UserInputError)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["checkpoint"].update(retaind=3), "checkpoint.retaind"),
        (lambda d: d["checkpoint"].update(timeout=[1, 2]), "checkpoint.timeout"),
        (lambda d: d["checkpoint"].pop("storage"), "checkpoint.storage"),
    ],
    ids=["unknown-field", "wrong-type", "missing-storage"],
)
def test_cli_exits_2_and_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate, field) -> None:
    data = spec_dict(tmp_path)
    mutate(data)
    path = write_spec(tmp_path, data)
    for argv in (["run", str(path), "--duration", "1"], ["checkpoints", "list", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert field in err and str(path) in err


def test_cli_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(DEMO), "--checkpoints", "zero"]) == 2
    assert main(["run", str(DEMO), "--duration", "-4"]) == 2
    assert "--duration" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value", "says"), [
    ("mode", "unaligned", "'unaligned' is not implemented yet"),
    ("alignment_timeout", "5s", "alignment timeout is not implemented yet"),
])
def test_settings_not_implemented_are_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         field: str, value: str, says: str) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"][field] = value
    err = _problems(tmp_path, data)
    assert [f for f, _ in err.problems] == [f"checkpoint.{field}"] and says in str(err)
    assert main(["checkpoints", "list", str(write_spec(tmp_path, data))]) == 2
    assert f"checkpoint.{field}" in capsys.readouterr().err


def test_the_implemented_values_are_accepted(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["checkpoint"].update({"mode": "aligned", "alignment_timeout": "0s"})
    assert load_spec(write_spec(tmp_path, data)).checkpoint.mode == "aligned"


def test_event_time_alignment_idleness_and_batch_sizing_are_read(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["event_time"] = {"watermark_delay": "5s", "idle_timeout": "3s",
                          "alignment": {"group": "g", "max_drift": "2s", "update_interval": "500ms"}}
    data["trigger"] = {"interval": "100ms", "target_batch_duration": "1s"}
    spec = load_spec(write_spec(tmp_path, data))
    assert spec.event_time is not None and spec.event_time.alignment is not None
    assert (spec.event_time.idle_timeout, spec.event_time.alignment.max_drift,
            spec.event_time.alignment.update_interval) == (3.0, 2.0, 0.5)
    assert spec.trigger.target_batch_duration == 1.0


@pytest.mark.parametrize(("section", "value", "field", "says"), [
    ("event_time", {"alignment": {"max_drift": "0s"}}, "event_time.alignment", "max_drift must be greater than 0"),
    ("event_time", {"alignment": {}}, "event_time.alignment.max_drift", "required"),
    ("event_time", {"idle_timeout": "0s"}, "event_time.idle_timeout", "greater than 0"),
    ("trigger", {"interval": "2s", "target_batch_duration": "1s"}, "trigger", "below trigger.interval"),
])
def test_bad_event_time_and_trigger_settings_exit_2_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, value: dict, field: str, says: str) -> None:
    data = spec_dict(tmp_path)
    data[section] = value
    err = _problems(tmp_path, data)
    assert any(f == field and says in message for f, message in err.problems), err.problems
    assert main(["checkpoints", "list", str(write_spec(tmp_path, data))]) == 2
    assert field in capsys.readouterr().err


def test_alignment_on_a_kafka_source_is_accepted(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["sources"] = [{"name": "in", "type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topics": ["t"]}]
    data["event_time"] = {"alignment": {"max_drift": "2s"}}
    spec = load_spec(write_spec(tmp_path, data))
    assert spec.event_time is not None and spec.event_time.alignment is not None


@pytest.mark.parametrize(("period", "source", "message"), [
    ({"partition": 0, "start": 5, "end": 5}, {}, "end (5) must be after start (5)"),
    ({"partition": 7, "start": 1, "end": 2}, {}, "partition 7 does not exist"),
    ({"partition": 0, "start": 1, "end": 2}, {"rows_per_second": 0}, "need a throttled generator"),
])
def test_bad_silent_periods_are_named(tmp_path: Path, period: dict, source: dict, message: str) -> None:
    data = spec_dict(tmp_path)
    data["sources"][0].update(silent_periods=[period], **source)
    err = _problems(tmp_path, data)
    assert any(f.startswith("sources.0") and message in m for f, m in err.problems), err.problems


def test_silent_seconds_count_only_the_elapsed_part_of_each_period(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["sources"][0].update(rows_per_second=10, silent_periods=[{"partition": 1, "start": 2, "end": 5},
                                                                  {"partition": 1, "start": 8, "end": 9}])
    source = load_spec(write_spec(tmp_path, data)).source
    assert [source.silent_seconds(1, t) for t in (1, 3, 6, 8.5, 20)] == [0, 1, 3, 3.5, 4]
    assert source.silent_seconds(0, 20) == 0


def test_the_demo_with_a_longer_window_differs_from_the_demo_in_its_window_only() -> None:
    """examples/demo-20s-window is what its README upgrades the demo to: the same pipeline (name,
    stores, source, state store, shuffle partitions; paths from the repository, as make sets
    BARRIERFLOW_HOME), 20-second windows."""
    root = DEMO.parents[2]
    longer = load_spec(root / "examples" / "demo-20s-window" / "pipeline.yaml", home=root)
    demo = load_spec(DEMO, home=root)
    assert longer.transformation.options == {"window": "20 seconds"}
    assert demo.transformation.options == {"window": "10 seconds"}
    assert longer.model_dump(exclude={"transformation", "description"}) == demo.model_dump(
        exclude={"transformation", "description"})
    assert longer.spark.state_store == "rocksdb"
