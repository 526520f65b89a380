"""Several sinks in one stage: which combinations load (any mix of Parquet, Iceberg and Delta),
which are refused at load naming the stage, the sinks and the fix, what the runtime builds for
them (one write-ahead writer and one committer per sink), and that a stage's cut record is a cut
only once it lists every table sink of the stage. No Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import SpecError, UserInputError
from barrierflow.ops.validate import validate_spec
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS, cut_layout
from barrierflow.pipeline.stage_options import derive_stage_spec
from barrierflow.sinks.cut import CutLog, TableVersion, tables_as_of
from barrierflow.sinks.factory import build_sinks, micro_batch_writer
from barrierflow.sinks.write_ahead import WriteAheadWriters
from barrierflow.spec import load_any_spec, parse_any_spec, parse_spec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.workdir.layout import JobLayout

from tests.pipeline_specs import spec_dict

REPO = Path(__file__).resolve().parents[2]


def three_sinks(tmp_path: Path) -> list[dict[str, Any]]:
    return [{"name": "ice", "type": "iceberg", "table": "lake.totals"},
            {"name": "dl", "type": "delta", "path": f"file://{tmp_path}/tables/totals"},
            {"name": "files", "type": "parquet", "path": f"file://{tmp_path}/out"}]


def test_a_stage_writes_any_mix_of_parquet_iceberg_and_delta_one_writer_and_committer_each(tmp_path: Path) -> None:
    spec = parse_spec(spec_dict(tmp_path, name="mix", sinks=three_sinks(tmp_path)))
    layout = JobLayout.for_spec(spec)
    writer = micro_batch_writer(spec, layout, fence=None)
    assert isinstance(writer, WriteAheadWriters)
    uris = [w.uri for w in writer.writers]
    assert len(set(uris)) == 3  # each sink writes ahead into its own area
    assert uris[1] == f"file://{tmp_path}/tables/totals/_barrierflow_staging/mix/dl"
    committers = build_sinks(spec, CheckpointStore.for_spec(spec), layout, attempt=0)
    assert [c.name for c in committers] == ["ice", "dl", "files"]
    assert [type(c).__name__ for c in committers] == ["IcebergSink", "DeltaSink", "ParquetFileSink"]


@pytest.mark.parametrize(("sinks", "message"), [
    ([{"name": "ice", "type": "iceberg", "table": "lake.t"},
      {"name": "pg", "type": "postgres", "dsn_env": "PG_DSN", "table": "t"}],
     r"this pipeline writes several sinks \('ice' \(iceberg\), 'pg' \(postgres\)\).*writing a postgres sink "
     r"beside others in one stage is not supported\): give each "
     r"postgres sink a stage of its own"),
    ([{"name": "ice", "type": "iceberg", "table": "lake.t"}, {"name": "none", "type": "discard"}],
     "writing a discard sink beside others"),
    ([{"name": "t", "type": "iceberg", "table": "lake.a"}, {"name": "t", "type": "iceberg", "table": "lake.b"}],
     "several sinks named 't'.*give each sink a distinct 'name'"),
    ([{"name": "a", "type": "delta", "path": "file:///x/t"}, {"name": "b", "type": "delta", "path": "file:///x/t/"}],
     "sinks 'a', 'b' write the same table or folder"),
])
def test_sinks_that_cannot_share_a_stage_are_refused_at_load(tmp_path: Path, sinks: list[dict[str, Any]],
                                                             message: str) -> None:
    data = spec_dict(tmp_path, name="bad", sinks=sinks)
    with pytest.raises(SpecError, match=message):
        parse_spec(data)


def staged(tmp_path: Path, first_sinks: list[dict[str, Any]], *, channels: bool) -> dict[str, Any]:
    base = spec_dict(tmp_path, name="two")
    source = base.pop("sources")
    transformation = base.pop("transformation")
    base.pop("sinks")
    second_source = ([{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}] if channels else source)
    return {**base, **({"channels": [{"name": "ab", "bootstrap": "127.0.0.1:9"}]} if channels else {}),
            "stages": [{"name": "a", "sources": source, "transformation": transformation, "sinks": first_sinks},
                       {"name": "b", "sources": second_source, "transformation": transformation,
                        "sinks": [{"name": "out", "type": "delta", "path": f"file://{tmp_path}/tables/b"}]}]}


def test_a_channel_and_tables_in_one_stage_are_refused_by_validate_and_run_naming_the_stage_and_the_fix(
        tmp_path: Path) -> None:
    sinks = [{"type": "channel", "channel": "ab"}, {"name": "ice", "type": "iceberg", "table": "lake.t"}]
    data = staged(tmp_path, sinks, channels=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    message = (r"stage 'a' writes several sinks \('ab' \(channel\), 'ice' \(iceberg\)\).*not supported\): give each "
               r"channel sink a stage of its own")
    with pytest.raises(SpecError, match=r"stages\[0\]\.sinks: " + message):
        validate_spec(path)
    with pytest.raises(UserInputError, match=message):  # what a run derives the stage with
        derive_stage_spec(parse_any_spec(data), parse_any_spec(data).stages[0], work_dir=str(tmp_path / "work"),
                          servers={"ab": "127.0.0.1:9"})


def test_stages_without_channels_between_them_are_one_pipeline_with_global_checkpoints(tmp_path: Path) -> None:
    spec = parse_any_spec(staged(tmp_path, three_sinks(tmp_path), channels=False))
    assert [len(s.sinks) for s in spec.stages] == [3, 1]
    assert cut_layout(spec) is GLOBAL_CHECKPOINTS
    one = staged(tmp_path, three_sinks(tmp_path), channels=False)
    one["stages"] = one["stages"][:1]
    with pytest.raises(SpecError, match="a pipeline of one stage without channels is written as a single-stage YAML"):
        parse_any_spec(one)


def test_the_four_tables_example_loads_as_two_stages_of_one_iceberg_and_one_delta_table(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FOUR_TABLES_HOME", str(tmp_path))
    spec = load_any_spec(REPO / "examples" / "lakehouse" / "four_tables.yaml")
    assert [(s.name, [k.type for k in s.sinks]) for s in spec.stages] == [
        ("seconds", ["iceberg", "delta"]), ("pairs", ["iceberg", "delta"])]


def version(table: str, checkpoint: int) -> TableVersion:
    return TableVersion("delta", table, checkpoint, checkpoint, {})


def test_a_stage_cut_record_is_a_cut_once_it_lists_every_table_sink_of_the_stage(tmp_path: Path) -> None:
    a, b = LocalObjectStore(tmp_path / "a"), LocalObjectStore(tmp_path / "b")
    for n in (1, 2):
        CutLog(a).record(n, {"x": version("ax", n)})
        CutLog(b).record(n, {"y": version("by", n)})
        if n == 1:  # stage a's second sink has committed checkpoint 1 only
            CutLog(a).record(n, {"z": version("az", n)})
    expected = {"a": ["x", "z"], "b": ["y"]}
    cut = tables_as_of({"a": a, "b": b}, None, expected)
    assert {name: v.checkpoint_id for name, v in cut.items() if v is not None} == {"a/x": 1, "a/z": 1, "b/y": 1}
    with pytest.raises(UserInputError, match="checkpoint 2 has a cut record without tables z for stage 'a'"):
        tables_as_of({"a": a, "b": b}, 2, expected)
    CutLog(a).record(2, {"z": version("az", 2)})
    assert set(tables_as_of({"a": a, "b": b}, None, expected)) == {"a/x", "a/z", "b/y"}
    assert tables_as_of({"a": a, "b": b}, None, expected)["a/z"].checkpoint_id == 2
