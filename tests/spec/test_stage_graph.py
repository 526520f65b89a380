"""Multi-stage specs: the models, the graph rules, cycles with back-edges, exit code 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.cli.main import main
from barrierflow.errors import SpecError, UserInputError
from barrierflow.spec import (
    PipelineSpec,
    build_graph,
    load_any_spec,
    load_spec,
    parse_any_spec,
    parse_staged_spec,
)
from barrierflow.spec.stages import ChannelSpec

from tests.pipeline_specs import spec_dict, write_spec

FIELDS = {"key": "long", "total": "long"}


def _stage(name: str, reads: list[str] | None = None, writes: list[str] | None = None,
           external: bool = False) -> dict[str, Any]:
    sources: list[dict[str, Any]] = [{"type": "channel", "channel": c, "json_fields": FIELDS} for c in reads or []]
    if external:
        sources.insert(0, {"name": "events", "type": "generator", "partitions": 2})
    sinks: list[dict[str, Any]] = [{"type": "channel", "channel": c} for c in writes or []]
    if not sinks:
        sinks = [{"name": "out", "type": "discard"}]
    return {"name": name, "sources": sources, "sinks": sinks,
            "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals"}}


def staged(tmp_path: Path, stages: list[dict[str, Any]], channels: list[str], **checkpoint: Any) -> dict[str, Any]:
    return {
        "name": "flow",
        "channels": [{"name": c, "partitions": 2} for c in channels],
        "stages": stages,
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", **checkpoint},
    }


def three_stages(tmp_path: Path) -> dict[str, Any]:
    """a and b read external sources; c joins their channels (two inputs)."""
    return staged(tmp_path, [_stage("a", writes=["ab"], external=True), _stage("b", writes=["bc"], external=True),
                             _stage("c", reads=["ab", "bc"])], ["ab", "bc"])


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse_staged_spec(data, "flow.yaml")
    return info.value.problems


def test_three_stage_graph(tmp_path: Path) -> None:
    spec = parse_staged_spec(three_stages(tmp_path))
    graph, problems = build_graph(spec)
    assert problems == [] and graph is not None
    assert graph.source_stages == ("a", "b") and graph.final_stages == ("c",)
    assert [str(e) for e in graph.edges] == ["a -[ab]-> c", "b -[bc]-> c"]
    assert graph.cycles == () and graph.back_edges == ()
    assert [e.channel for e in graph.inputs("c")] == ["ab", "bc"]
    assert spec.channel("ab").topic_for(spec.name) == "flow.ab"


def test_single_stage_spec_stays_valid_and_is_told_apart(tmp_path: Path) -> None:
    single = spec_dict(tmp_path)
    assert parse_any_spec(copy.deepcopy(single)).name == "t"
    assert isinstance(parse_any_spec(three_stages(tmp_path)), PipelineSpec)
    with pytest.raises(SpecError, match="several stages") as info:
        load_spec(write_spec(tmp_path, three_stages(tmp_path)))
    assert info.value.problems[0][0] == "stages"


def test_cycle_is_found_with_its_back_edge(tmp_path: Path) -> None:
    # a -> b -> c -> b (feedback): the DFS from a enters b first, so c -> b closes the cycle.
    data = staged(tmp_path, [_stage("a", writes=["ab"], external=True),
                             _stage("b", reads=["ab", "feedback"], writes=["bc"]),
                             _stage("c", reads=["bc"], writes=["feedback"])], ["ab", "bc", "feedback"])
    graph, _ = build_graph(parse_staged_spec(data))
    assert graph is not None
    assert [str(e) for e in graph.back_edges] == ["c -[feedback]-> b"]
    assert graph.is_back_edge("feedback", "b") and not graph.is_back_edge("ab", "b")
    (cycle,) = graph.cycles
    assert cycle.stages == ("b", "c")
    assert str(cycle) == "b -> c -> b (back-edge: channel 'feedback' from c to b)"
    assert graph.final_stages == ()


def test_self_loop_is_a_back_edge(tmp_path: Path) -> None:
    data = staged(tmp_path, [_stage("a", reads=["loop"], writes=["loop"], external=True)], ["loop"])
    graph, _ = build_graph(parse_staged_spec(data))
    assert graph is not None and [str(e) for e in graph.back_edges] == ["a -[loop]-> a"]


def test_channel_written_by_two_stages_is_named(tmp_path: Path) -> None:
    data = staged(tmp_path, [_stage("a", writes=["x"], external=True), _stage("b", writes=["x"], external=True),
                             _stage("c", reads=["x"])], ["x"])
    assert _problems(data) == [("channels.0", "channel 'x' is written by stages a, b; a channel has exactly one "
                                "writing stage: give each its own channel")]


def test_channel_without_writer_or_reader_is_named(tmp_path: Path) -> None:
    data = staged(tmp_path, [_stage("a", writes=["ab"], external=True), _stage("b", reads=["ab", "orphan"])],
                  ["ab", "orphan", "unused"])
    problems = _problems(data)
    assert [(f, m.split(";")[0]) for f, m in problems] == [
        ("channels.1", "channel 'orphan' is written by no stage"),
        ("channels.2", "channel 'unused' is written by no stage"),
        ("channels.2", "channel 'unused' is read by no stage"),
    ]


def test_undeclared_channel_and_duplicates_are_named(tmp_path: Path) -> None:
    data = staged(tmp_path, [_stage("a", writes=["ab"], external=True), _stage("a", reads=["ab", "typo"])], ["ab"])
    problems = _problems(data)
    assert ("stages.1.name", "stage name 'a' is used twice; names must be unique") in problems
    assert any(f == "stages.1.sources.1.channel" and "'typo', which is not declared (channels: ab)" in m
               for f, m in problems)


def test_stage_unreachable_from_a_source_is_named(tmp_path: Path) -> None:
    # b and c feed each other but nothing feeds them from a source stage.
    data = staged(tmp_path, [_stage("a", external=True), _stage("b", reads=["cb"], writes=["bc"]),
                             _stage("c", reads=["bc"], writes=["cb"])], ["bc", "cb"])
    problems = _problems(data)
    assert [f for f, _ in problems] == ["stages.1", "stages.2"]
    assert "stage 'b' is not reachable from a stage with an external source (a)" in problems[0][1]


def test_no_external_source_at_all(tmp_path: Path) -> None:
    data = staged(tmp_path, [_stage("a", reads=["loop"], writes=["loop"])], ["loop"])
    assert "no stage reads an external source" in _problems(data)[0][1]


def test_model_errors_name_the_stage_field(tmp_path: Path) -> None:
    data = three_stages(tmp_path)
    del data["stages"][2]["sources"][0]["json_fields"]
    data["channels"][0]["bootstrap"] = "not an address"
    fields = [f for f, _ in _problems(data)]
    assert "stages.2.sources.0.channel.json_fields" in fields
    assert "channels.0.bootstrap" in fields


def test_modes_are_accepted_for_several_stages_only(tmp_path: Path) -> None:
    spec = parse_staged_spec(three_stages(tmp_path) | {"checkpoint": {
        "storage": f"file://{tmp_path}", "mode": "aligned", "alignment_timeout": "1s"}})
    assert spec.checkpoint.alignment_timeout == 1.0
    assert parse_staged_spec(three_stages(tmp_path) | {"checkpoint": {
        "storage": f"file://{tmp_path}", "mode": "unaligned"}}).checkpoint.mode.value == "unaligned"
    problems = _problems(three_stages(tmp_path) | {"checkpoint": {
        "storage": f"file://{tmp_path}", "mode": "unaligned", "alignment_timeout": "1s"}})
    assert problems[0][0] == "checkpoint" and "applies to mode 'aligned' only" in problems[0][1]


def test_channel_bootstrap_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ChannelSpec(name="x").bootstrap_servers() is None
    assert ChannelSpec(name="x", bootstrap=" h1:9092, h2:9093").bootstrap_servers() == "h1:9092,h2:9093"
    monkeypatch.setenv("BF_TEST_CHANNEL_KAFKA", "k:9092")
    assert ChannelSpec(name="x", bootstrap="env:BF_TEST_CHANNEL_KAFKA").bootstrap_servers() == "k:9092"
    monkeypatch.delenv("BF_TEST_CHANNEL_KAFKA")
    with pytest.raises(UserInputError, match=r"channel 'x'.*BF_TEST_CHANNEL_KAFKA, which is not set"):
        ChannelSpec(name="x", bootstrap="env:BF_TEST_CHANNEL_KAFKA").bootstrap_servers()


def test_validate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = staged(tmp_path, [_stage("a", writes=["ab"], external=True),
                             _stage("b", reads=["ab", "feedback"], writes=["feedback"])], ["ab", "feedback"])
    path = write_spec(tmp_path, data, "flow.yaml")
    assert isinstance(load_any_spec(path), PipelineSpec)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid pipeline flow of 2 stages (aligned checkpoints)" in out
    assert "b -> b via channel feedback (topic flow.feedback)  (back-edge)" in out
    assert "cycle: b -> b (back-edge: channel 'feedback' from b to b)" in out
    assert main(["validate", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["cycles"][0]["back_edge"]["channel"] == "feedback"
    single = write_spec(tmp_path, spec_dict(tmp_path), "single.yaml")
    assert main(["validate", str(single)]) == 0 and "single-stage" in capsys.readouterr().out


def test_bad_graph_exits_2_naming_the_channel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = staged(tmp_path, [_stage("a", writes=["x"], external=True), _stage("b", writes=["x"], external=True),
                             _stage("c", reads=["x"])], ["x"])
    assert main(["validate", str(write_spec(tmp_path, data, "bad.yaml"))]) == 2
    err = capsys.readouterr().err
    assert "channels.0: channel 'x' is written by stages a, b" in err
