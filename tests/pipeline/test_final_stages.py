"""Which final stage the batch side works on, its derived ``batch`` settings, the order a batch
replay runs the stages in, and what is refused before Spark starts (no Spark, no broker)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.batch.stage_replay import StageReplayError, replay_order
from barrierflow.cli.main import main
from barrierflow.errors import SpecError
from barrierflow.ops.batch import batch_target
from barrierflow.pipeline.final_stages import FinalStageError, choose_final_stage, parquet_final_stages
from barrierflow.spec import parse_staged_spec

from tests.pipeline_specs import spec_dict, write_spec

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}
PROJECT = {"function": "barrierflow.transforms.projection:project",
           "options": {"columns": {"key": "key", "value": "value", "event_time": "event_time"}}}


def fan_out(tmp_path: Path, **stage_x: Any) -> dict[str, Any]:
    """Stage ``a`` (generator) writes channel ``ab``, read by two final stages writing Parquet
    beside each other (``x``, ``y``) and by ``z``, a final stage that discards."""
    reader = {"type": "channel", "channel": "ab", "json_fields": FIELDS}
    return {
        "name": "fan", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "partitions": 1, "bootstrap": "embedded"}],
        "stages": [
            {"name": "a", "sources": [{"type": "generator", "partitions": 1}], "transformation": PROJECT,
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "x", "sources": [reader], "transformation": PROJECT,
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'lake' / 'x'}"}], **stage_x},
            {"name": "y", "sources": [reader], "transformation": PROJECT,
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'lake' / 'y'}"}]},
            {"name": "z", "sources": [reader], "transformation": PROJECT, "sinks": [{"name": "d", "type": "discard"}]},
        ],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
        "event_time": {"column": "event_time", "watermark_delay": "1s"},
    }


def test_the_final_parquet_stage_is_named_unless_there_is_only_one(tmp_path: Path) -> None:
    spec = parse_staged_spec(fan_out(tmp_path))

    assert [s.name for s in parquet_final_stages(spec)] == ["x", "y"]
    assert choose_final_stage(spec, "y").name == "y"
    for name, message in ((None, "several final stages with a Parquet sink (x, y): name the one to work on "
                                 "with --stage NAME"),
                          ("a", "stage 'a' writes a channel (its output goes on to other stages)"),
                          ("z", "stage 'z' writes a 'discard' sink, not Parquet"),
                          ("nope", "has no stage 'nope'; final stages with a Parquet sink: x, y")):
        with pytest.raises(FinalStageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            choose_final_stage(spec, name)
    only = fan_out(tmp_path)
    only["stages"] = only["stages"][:2]
    assert choose_final_stage(parse_staged_spec(only), None).name == "x"


def test_a_final_stage_is_worked_on_through_its_own_spec_store_and_rollups(tmp_path: Path) -> None:
    path = write_spec(tmp_path, fan_out(tmp_path, batch={"keys": ["key"], "measures": ["value"]}))

    x, y = batch_target(path, "x"), batch_target(path, "y")

    assert (x.spec.name, x.stage, x.name) == ("fan-x", "x", "fan/x")
    assert x.store.objects.uri == f"file://{tmp_path / 'chk' / 'stages' / 'x'}"
    assert x.spec.sink.path == f"file://{tmp_path / 'lake' / 'x'}"  # type: ignore[union-attr]
    # The stage's own batch settings; rollups per stage, never shared by the stages writing beside each other.
    assert (x.spec.batch.keys, x.spec.batch.measures) == (["key"], ["value"])
    assert x.spec.batch.rollups == f"file://{tmp_path / 'lake' / 'rollups' / 'x'}"
    assert y.spec.batch.rollups == f"file://{tmp_path / 'lake' / 'rollups' / 'y'}"
    assert set(x.stage_specs) == {"a", "x", "y", "z"}


def test_batch_is_refused_on_a_stage_without_a_parquet_sink(tmp_path: Path) -> None:
    data = fan_out(tmp_path)
    data["stages"][0]["batch"] = {"keys": ["key"]}
    with pytest.raises(SpecError, match="batch applies to a stage with a Parquet sink"):
        parse_staged_spec(data)


def test_a_replay_runs_every_stage_after_the_stages_it_reads(tmp_path: Path) -> None:
    data = fan_out(tmp_path)
    data["channels"].append({"name": "cx", "partitions": 1, "bootstrap": "embedded"})
    data["stages"].insert(0, {"name": "c", "sources": [{"type": "generator", "partitions": 1}],
                              "transformation": PROJECT, "sinks": [{"type": "channel", "channel": "cx"}]})
    data["stages"][2]["sources"].append({"type": "channel", "channel": "cx", "json_fields": FIELDS})
    spec = parse_staged_spec(data)

    assert replay_order(spec, "x") == ["c", "a", "x"]  # y and z are not upstream of x
    assert replay_order(spec, "y") == ["a", "y"]


def test_batch_commands_name_a_wrong_stage_before_spark_starts(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    staged = write_spec(tmp_path, fan_out(tmp_path), "fan.yaml")
    single = write_spec(tmp_path, spec_dict(tmp_path), "single.yaml")

    for argv, message in ((["rollup", str(staged)], "several final stages with a Parquet sink (x, y)"),
                          (["recompute", str(staged), "--stage", "a"], "stage 'a' writes a channel"),
                          (["quality", str(staged), "--stage", "z"], "stage 'z' writes a 'discard' sink"),
                          (["rollup", str(single), "--stage", "x"], "is a single-stage spec: it has no stage 'x'")):
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err


def test_recompute_refuses_a_final_stage_downstream_of_a_cycle_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))
    path = tmp_path / "cycle.yaml"
    shutil.copy(ROOT / "include" / "pipelines" / "cycle.yaml", path)
    spec = parse_staged_spec(yaml.safe_load(path.read_text(encoding="utf-8")))

    with pytest.raises(StageReplayError, match=r"stage 'store' depends on the cycle .* \(back-edge: channel"):
        replay_order(spec, "store")
    assert main(["recompute", str(path)]) == 2
    err = capsys.readouterr().err
    assert "depends on the cycle" in err and "cannot be recomputed in batch" in err


def test_the_batch_job_hands_the_stage_to_the_command_line() -> None:
    import importlib.util

    loaded = importlib.util.spec_from_file_location("batch_job", ROOT / "jobs" / "batch_job.py")
    assert loaded is not None and loaded.loader is not None
    job = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(job)

    args = job.build_parser().parse_args(["recompute", "--spec", "p.yaml", "--stage", "b", "--tag", "run1"])
    assert job.cli_args(args) == ["recompute", "p.yaml", "--json", "--tag", "run1", "--stage", "b", "--report-only"]
    args = job.build_parser().parse_args(["rollup", "--spec", "p.yaml"])
    assert job.cli_args(args) == ["rollup", "p.yaml", "--json"]  # single stage: no --stage


def test_recompute_refuses_a_final_stage_fed_by_a_stage_that_writes_updates(tmp_path: Path) -> None:
    data = fan_out(tmp_path)
    data["stages"][0]["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                           "output_mode": "update"}
    spec = parse_staged_spec(data)

    with pytest.raises(StageReplayError, match="stage 'x' reads what stage 'a' wrote in output mode 'update'"):
        replay_order(spec, "x")
