"""What ``barrierflow upgrade`` refuses of a pipeline of several stages, and how it names the fix.

Spark-free: the compatibility report is built with :func:`~barrierflow.state.compatibility.compare`
from what the state reader and the planner would give (one aggregation in stage ``b``), over
specs that are only opened (:func:`~barrierflow.pipeline.model.open_pipeline`), and judged by
:func:`~barrierflow.upgrade.plan.refuse_stage_changes`, which every upgrade runs before it writes
anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.state.compatibility import CompatibilityReport, PlannedStage, StageState, compare
from barrierflow.state.reader import OperatorSchema
from barrierflow.upgrade.plan import UpgradeNotSupportedError, refuse_stage_changes

TOTALS = {"operator": "Aggregate", "grouping keys": ["key: bigint"],
          "aggregates": ["count(1) AS count: bigint", "sum(value) AS value_sum: bigint"]}
OPERATOR = OperatorSchema(0, "stateStoreSave", ("default",), 4, "struct<key:bigint>",
                          "struct<count:bigint,value_sum:bigint>")


def stage(name: str, source: dict[str, Any], sink: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "sources": [source], "sinks": [sink],
            "transformation": {"function": "barrierflow.transforms.projection:project",
                               "options": {"columns": {"key": "key"}}}}


def channel(name: str) -> dict[str, Any]:
    return {"name": name, "topic": f"t-{name}", "partitions": 2, "bootstrap": "127.0.0.1:9"}


def reads(name: str) -> dict[str, Any]:
    return {"type": "channel", "channel": name, "json_fields": {"key": "long", "value": "long"}}


def two_stages(tmp: Path) -> dict[str, Any]:
    """a: generator -> ab; b: ab -> Parquet (b's totals are what the report says it holds)."""
    return {"name": "p", "work_dir": str(tmp / "work"), "channels": [channel("ab")],
            "stages": [stage("a", {"name": "events", "type": "generator", "partitions": 2},
                             {"type": "channel", "channel": "ab"}),
                       stage("b", reads("ab"), {"name": "out", "type": "parquet", "path": f"file://{tmp / 'out'}"})],
            "checkpoint": {"storage": f"file://{tmp / 'chk'}"}}


def opened(tmp: Path, data: dict[str, Any], name: str) -> OpenedPipeline:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return open_pipeline(path)


def report(old: OpenedPipeline, new: OpenedPipeline, *, shuffle: dict[str, str] | None = None,
           fingerprints: dict[str, list[dict[str, Any]]] | None = None,
           defaults: dict[str, dict[str, Any]] | None = None) -> CompatibilityReport:
    """The report over a cut where b holds OPERATOR (4 partitions) and a no state; the new
    stages planned with ``fingerprints`` (default: b's TOTALS), ``shuffle`` partitions (default 4)
    and ``defaults`` (stage -> its transformation.state_defaults)."""
    planned_fp = {"b": [TOTALS], **(fingerprints or {})}
    states = [StageState(s.name, [OPERATOR] if s.name == "b" else [], [TOTALS] if s.name == "b" else [], "4",
                         {s.spec.source.name: s.source_type}, "sink") for s in old.stages]
    planned = [PlannedStage(s.name, planned_fp.get(s.name, []), (shuffle or {}).get(s.name, "4"),
                            {s.spec.source.name: s.source_type}, "sink", (defaults or {}).get(s.name, {}))
               for s in new.stages]
    was, now = ({c.name: (c.topic_for(p.name), c.partitions) for c in p.channels} for p in (old, new))
    graph, verdicts = compare(states, planned, old_channels=was, new_channels=now,
                              old_storage=old.storage, new_storage=new.storage)
    return CompatibilityReport("p", "old.yaml", "new.yaml", 1, "global checkpoint", graph, verdicts)


def test_a_removed_stage_is_dropped_only_when_named(tmp_path: Path) -> None:
    three = two_stages(tmp_path)
    three["channels"].append(channel("bc"))
    three["stages"][1]["sinks"] = [{"type": "channel", "channel": "bc"}]
    three["stages"].append(stage("c", reads("bc"), {"name": "out", "type": "parquet",
                                                    "path": f"file://{tmp_path / 'out-c'}"}))
    old, new = opened(tmp_path, three, "three"), opened(tmp_path, two_stages(tmp_path), "two")
    found = report(old, new)
    with pytest.raises(UpgradeNotSupportedError, match=r"removes stage c of pipeline p: .* add --drop-stage c"):
        refuse_stage_changes(found, old, new, ())
    refuse_stage_changes(found, old, new, ("c",))  # channel bc removed with it: nothing else to refuse
    with pytest.raises(UserInputError, match=r"--drop-stage zz: .* has no stage 'zz'; its stages: \['a', 'b', 'c'\]"):
        refuse_stage_changes(found, old, new, ("c", "zz"))
    with pytest.raises(UserInputError, match=r"--drop-stage b: .* still has stage b"):
        refuse_stage_changes(found, old, new, ("c", "b"))


def test_what_is_not_rewritten_yet_is_named_with_its_fix(tmp_path: Path) -> None:
    base = two_stages(tmp_path)
    old = opened(tmp_path, base, "old")
    fan_out = json.loads(json.dumps(base))
    fan_out["stages"].append(stage("c", reads("ab"), {"name": "out", "type": "parquet",
                                                      "path": f"file://{tmp_path / 'out-c'}"}))
    new = opened(tmp_path, fan_out, "fan-out")
    with pytest.raises(UpgradeNotSupportedError, match=r"stage c is new .* reads channels the old pipeline already "
                                                       r"has \(t-ab:0, t-ab:1\).* Add it behind a new channel"):
        refuse_stage_changes(report(old, new), old, new, ())

    same = opened(tmp_path, base, "same")
    wider = [{**TOTALS, "aggregates": [*TOTALS["aggregates"], "max(value) AS top: bigint"]}]
    with pytest.raises(UpgradeNotSupportedError, match=r"stage b operator 0 .*value column added: max\(value\) AS "
                                                       r"top: bigint; no default is declared for it.* declare .* in "
                                                       r"the new spec's transformation.state_defaults \(top: VALUE"):
        refuse_stage_changes(report(old, same, fingerprints={"b": wider}), old, same, ())
    # with a declared default, or a column dropped: rewritten (not refused); with a rescale of the stage: refused
    refuse_stage_changes(report(old, same, fingerprints={"b": wider}, defaults={"b": {"top": 0}}), old, same, ())
    narrower = [{**TOTALS, "aggregates": TOTALS["aggregates"][:1]}]
    refuse_stage_changes(report(old, same, fingerprints={"b": narrower}), old, same, ())
    with pytest.raises(UpgradeNotSupportedError, match=r"value column dropped: sum\(value\) AS value_sum: bigint.*"
                                                       r"shuffle partitions change too; .* upgrade twice"):
        refuse_stage_changes(report(old, same, fingerprints={"b": narrower}, shuffle={"b": "2"}), old, same, ())
    with pytest.raises(UpgradeNotSupportedError, match=r"stage a shuffle partitions: .*give stage a its old value "
                                                       r"\(stages\[\]\.shuffle_partitions\)"):
        refuse_stage_changes(report(old, same, shuffle={"a": "2"}), old, same, ())
    refuse_stage_changes(report(old, same, shuffle={"b": "2"}), old, same, ())  # a rescale of b: rewritten


def test_drop_stage_is_for_pipelines_of_several_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.main import main

    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({
        "version": 1, "name": "one", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 1}],
        "transformation": {"function": "barrierflow.transforms.projection:project"},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}}), encoding="utf-8")
    assert main(["upgrade", str(path), "--to", str(path), "--drop-stage", "one"]) == 2
    err = capsys.readouterr().err
    assert f"--drop-stage applies to pipelines of several stages; {path} has one stage" in err, err
    assert not (tmp_path / "chk").exists() or not any((tmp_path / "chk").rglob("_metadata.json"))


def test_keys_that_change_meaning_are_rebuilt_from_a_replayable_input_else_dropped() -> None:
    """The pure verdicts: a changed grouping key (or a value column's type) needs a rewrite that
    rebuilds the stage's state when its input replays (``rebuild_refusal`` None), and is
    incompatible, saying why, when it does not; another state store is incompatible either way."""
    from barrierflow.state.compatibility import REBUILD, Verdict, compare, is_rebuild
    from barrierflow.upgrade.plan import planned_rebuilds

    regrouped = {**TOTALS, "grouping keys": ["partition: int"]}
    retyped = {**TOTALS, "aggregates": ["count(1) AS count: bigint", "sum(value) AS value_sum: double"]}
    state = StageState("b", [OPERATOR], [TOTALS], "4", {"events": "generator"}, "sink", "rocksdb")

    def verdict(fingerprint: dict[str, Any], refusal: str | None, store: str = "rocksdb") -> Any:
        planned = PlannedStage("b", [fingerprint], "4", {"events": "generator"}, "sink", {}, refusal, store)
        _, stages = compare([state], [planned], old_channels={}, new_channels={}, old_storage="s", new_storage="s")
        return stages[0]

    for changed, what in ((regrouped, "grouping keys changed"), (retyped, "value column value_sum changed")):
        rebuilt = verdict(changed, None)
        assert rebuilt.verdict is Verdict.NEEDS_REWRITE and [is_rebuild(f) for f in rebuilt.findings] == [True]
        assert what in rebuilt.findings[0].reason and REBUILD in rebuilt.findings[0].reason
        assert rebuilt.findings[0].as_dict()["rebuild"] is True  # the JSON document says it too
        report = CompatibilityReport("p", "old", "new", 1, "checkpoint", [], [rebuilt])
        assert planned_rebuilds(report) == ["b"]
        dropped = verdict(changed, "stage b reads a kafka source, whose records ... cannot be read again")
        assert dropped.verdict is Verdict.INCOMPATIBLE and not any(is_rebuild(f) for f in dropped.findings)
        assert "would be dropped (no rebuild: stage b reads a kafka source" in dropped.findings[0].reason
        assert "rebuild" not in dropped.findings[0].as_dict()
    moved = verdict(TOTALS, None, store="hdfs")
    assert moved.verdict is Verdict.INCOMPATIBLE, moved.findings
    assert "spark.state_store rocksdb -> hdfs" in moved.findings[0].reason
