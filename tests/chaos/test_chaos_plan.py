"""What ``barrierflow chaos`` decides before and after the runs, without running a pipeline:
which specs it refuses, the scratch copies, the comparison of outputs and the report."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.chaos.outputs import canonical, kafka_row, with_aliases
from barrierflow.chaos.report import summary_lines, write_report
from barrierflow.chaos.runner import ChaosEvent, ChaosOptions, ChaosResult, OutputComparison, _Copy
from barrierflow.chaos.scratch import ChaosRefusedError, _overlap, _stores, check_judgeable, scratch_copy
from barrierflow.errors import UserInputError
from barrierflow.spec import parse_any_spec, parse_spec, parse_staged_spec


def single(**source: Any) -> dict[str, Any]:
    return {"version": 1, "name": "orders", "work_dir": "/data/orders/work",
            "sources": [{"name": "events", "type": "generator", "records_per_partition": 100, **source}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "lake", "type": "parquet", "path": "s3://bucket/lake/orders"}],
            "checkpoint": {"storage": "file:///data/orders/chk"}}


def staged() -> dict[str, Any]:
    return {"version": 1, "name": "two", "work_dir": "/data/two/work",
            "channels": [{"name": "ab", "topic": "orders.ab"}],
            "stages": [
                {"name": "a", "sources": [{"name": "g", "type": "generator", "records_per_partition": 10}],
                 "transformation": {"function": "barrierflow.transforms.projection:project"},
                 "sinks": [{"type": "channel", "channel": "ab"}]},
                {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}],
                 "transformation": {"function": "barrierflow.transforms.projection:project"},
                 "sinks": [{"name": "pg", "type": "postgres", "table": "public.totals"}]}],
            "checkpoint": {"storage": "file:///data/two/chk"}}


def test_an_unbounded_generator_and_a_non_deterministic_transformation_are_refused_with_the_reason() -> None:
    data = single()
    del data["sources"][0]["records_per_partition"]
    with pytest.raises(ChaosRefusedError, match="generator source 'events' is unbounded; set records_per_partition"):
        check_judgeable(parse_any_spec(data))
    data = single()
    data["transformation"]["deterministic"] = False
    with pytest.raises(ChaosRefusedError, match="declared 'deterministic: false'"):
        check_judgeable(parse_any_spec(data))
    data = single()
    data["sinks"] = [{"name": "nothing", "type": "discard"}]
    with pytest.raises(ChaosRefusedError, match="no Parquet, PostgreSQL or Kafka sink"):
        check_judgeable(parse_any_spec(data))
    assert check_judgeable(parse_any_spec(single())) == []


def test_a_scratch_copy_moves_everything_a_run_writes_and_keeps_what_it_reads(tmp_path: Path) -> None:
    data, outputs = scratch_copy(single(), copy_name="ref", root=tmp_path / "ref", stamp="20261125194501")
    spec = parse_spec(data)
    assert spec.name != "orders" and spec.name.startswith("orders-") and spec.name.endswith("-ref")
    assert spec.work_dir == str(tmp_path / "ref" / "work")
    assert spec.checkpoint.storage == f"file://{tmp_path / 'ref' / 'checkpoints'}"
    # the user's storage kind, beside the spec's prefixes (never inside one of them)
    assert spec.sinks[0].path == "s3://bucket/barrierflow-chaos/orders-20261125194501/ref/out-orders-0-lake"
    assert spec.sources[0].records_per_partition == 100 and spec.transformation.function.endswith(":project")
    assert [(o.kind, o.original) for o in outputs] == [("parquet", "s3://bucket/lake/orders")]

    data, outputs = scratch_copy(staged(), copy_name="chaos", root=tmp_path / "c", stamp="20261125194501")
    spec = parse_staged_spec(data)
    assert spec.channels[0].topic == "orders.ab.chaos-20261125194501-chaos"
    assert spec.stage("b").sinks[0].table == "public.totals_chaos_194501_chaos"
    assert [(o.stage, o.kind, o.target) for o in outputs] == [("b", "postgres", "public.totals_chaos_194501_chaos")]
    assert staged()["channels"][0]["topic"] == "orders.ab"  # the input mapping is not changed


def every_store() -> dict[str, Any]:
    """A two-stage spec that names every store a run writes, on local storage and on S3, and
    reads a file:// value in its transformation's options."""
    raw = staged()
    raw.update({"dead_letter_path": "s3://bucket/two/dead-letter", "event_times_path": "file:///data/two/event-times"})
    raw["checkpoint"]["storage"] = "s3://bucket/two"  # the dead letters' prefix lies in it
    raw["stages"][1]["sinks"] = [
        {"name": "pg", "type": "postgres", "table": "public.totals", "write_ahead_path": "file:///data/two/pg-staging"},
        {"name": "lake", "type": "parquet", "path": "file:///data/two/lake"},
        {"name": "out", "type": "kafka", "bootstrap_servers": "127.0.0.1:9", "topic": "totals",
         "commit_marker_topic": "two_commits", "write_ahead_path": "s3://bucket/two-staging"},
        {"name": "out2", "type": "kafka", "bootstrap_servers": "127.0.0.1:9", "topic": "totals2"}]
    raw["stages"][1]["batch"] = {"rollups": "file:///data/two/rollups"}
    raw["stages"][1]["transformation"]["options"] = {"lookup": "file:///data/two/reference-table"}
    return raw


def test_a_scratch_copy_moves_every_store_the_spec_names(tmp_path: Path) -> None:
    """Every storage URI a run writes moves under the scratch dir (file://) or the bucket's
    chaos prefix (s3://), and lies in none of the spec's stores; what the transformation reads stays."""
    raw = every_store()
    data, outputs = scratch_copy(raw, copy_name="ref", root=tmp_path / "ref", stamp="20261125194501")
    assert raw == every_store()  # the input mapping is not changed
    spec, original = parse_staged_spec(data), parse_staged_spec(raw)
    assert spec.dead_letter_path == "s3://bucket/barrierflow-chaos/two-20261125194501/ref/dead_letter_path"
    assert spec.event_times_path == f"file://{tmp_path / 'ref' / 'event_times_path'}"
    assert spec.checkpoint.storage == "s3://bucket/barrierflow-chaos/two-20261125194501/ref/checkpoints"
    sinks = {sink.name: sink for sink in spec.stage("b").sinks}
    assert sinks["pg"].write_ahead_path == f"file://{tmp_path / 'ref' / 'stages.1.sinks.0.write_ahead_path'}"
    assert sinks["lake"].path == f"file://{tmp_path / 'ref' / 'out-b-1-lake'}"
    assert spec.stage("b").batch.rollups == f"file://{tmp_path / 'ref' / 'stages.1.batch.rollups'}"
    assert (sinks["out"].commit_marker_topic, sinks["out2"].commit_marker_topic) == (
        "two_commits.chaos-20261125194501-ref", "__barrierflow_commits.chaos-20261125194501-ref")
    assert [o.marker_topics for o in outputs if o.kind == "kafka"] == [
        ("two_commits", "two_commits.chaos-20261125194501-ref"),
        ("__barrierflow_commits", "__barrierflow_commits.chaos-20261125194501-ref")]
    assert spec.stage("b").transformation.options == {"lookup": "file:///data/two/reference-table"}
    copied, spec_stores = _stores(data), _stores(raw)
    assert len(copied) == len(spec_stores) == 8  # work_dir, checkpoint, 2 shared paths, 2 staging, lake, rollups
    assert not [(mine, theirs) for _, mine in copied for _, theirs in spec_stores if _overlap(mine, theirs)]
    assert all(getattr(spec, f) != getattr(original, f) for f in ("dead_letter_path", "event_times_path", "work_dir"))


@pytest.mark.parametrize(("change", "message"), [
    (lambda raw, tmp: raw.update(work_dir=str(tmp)), r"the ref copy's work_dir \(.*\) and the spec's work_dir"),
    (lambda raw, tmp: raw.update(dead_letter_path="s3://bucket"),
     r"the ref copy's .* \(s3://bucket/barrierflow-chaos/.*\) and the spec's dead_letter_path \(s3://bucket\) "
     r"overlap: .* not a whole bucket"),
])
def test_a_copy_that_would_write_into_one_of_the_specs_stores_is_refused(
        tmp_path: Path, change: Any, message: str) -> None:
    raw = single()
    change(raw, tmp_path)  # the scratch dir inside the work dir; a store that is a whole bucket
    with pytest.raises(ChaosRefusedError, match=message):
        scratch_copy(raw, copy_name="ref", root=tmp_path / "scratch" / "ref", stamp="20261125194501")


def test_outputs_compare_as_multisets_of_rows() -> None:
    comparison = OutputComparison("b", "out", "parquet", "ref", "chaos")
    comparison.compare(Counter({"r1": 1, "r2": 2, "r3": 1}), Counter({"r1": 2, "r2": 1, "r4": 1}))
    assert (comparison.rows_expected, comparison.rows) == (4, 4)
    assert (comparison.missing, comparison.extra, comparison.duplicated) == (2, 1, 1)  # r2 once and r3; r4; r1
    assert comparison.examples == {"missing": ["r2", "r3"], "extra": ["r4"], "duplicated": ["r1"]}


def test_kafka_rows_compare_keys_and_the_partitions_of_keyed_records() -> None:
    value = b'{"n": 1, "k": "a"}'
    assert kafka_row(b"a", 0, value) != kafka_row(b"b", 0, value)  # another key
    assert kafka_row(b"a", 0, value) != kafka_row(b"a", 1, value)  # a keyed record in another partition
    assert kafka_row(None, 0, value) == kafka_row(None, 1, value)  # unkeyed: placed by the moment, not compared
    assert kafka_row(None, 0, value) != kafka_row(b"", 0, value)  # no key is not an empty key
    assert json.loads(kafka_row(b"\xff\x00", 2, value)) == {"key": "ff00", "partition": 2,
                                                           "value": {"k": "a", "n": 1}}
    comparison = OutputComparison("b", "out", "kafka", "ref", "chaos")
    comparison.compare(Counter({kafka_row(b"a", 0, value): 1}), Counter({kafka_row(b"a", 1, value): 1}))
    assert (comparison.missing, comparison.extra) == (1, 1)


def test_a_different_dead_letter_count_fails_the_verdict() -> None:
    result = ChaosResult("orders", "orders.yaml", 7, "group", 1, "/s", datetime(2026, 11, 25, tzinfo=UTC))
    comparison = OutputComparison("orders", "lake", "parquet", "a", "b")
    comparison.compare(Counter({"x": 1}), Counter({"x": 1}))
    result.outputs.append(comparison)
    result.kills["group"] = 1
    result.dead_letters_expected, result.dead_letters = 14, 14
    assert result.passed and "  dead letters: expected 14, written 14" in summary_lines(result)
    result.dead_letters = 15
    assert not result.passed and "  dead letters: expected 14, written 15 (they differ)" in summary_lines(result)
    assert result.as_dict()["dead_letters_expected"] == 14


def test_rows_naming_a_copys_channel_topic_compare_as_the_specs_topic(tmp_path: Path) -> None:
    """A stage that writes the topic a record came from (the three-stage example's ``topic``
    column) gives rows naming each copy's own derived topic; read through the copy's aliases,
    the reference's and the chaos copy's rows are equal again (found by the first chaos run of
    the three-stage example: 60,000 missing and 60,000 extra rows, all of them equal but the topic)."""
    raw = staged()
    del raw["channels"][0]["topic"]  # derived from the pipeline name, so each copy's differs
    original = parse_staged_spec(raw)
    copies = [_Copy(raw, name, tmp_path / name, "20261125230000", original) for name in ("ref", "chaos")]
    topics = [copy.spec.channel("ab").topic_for(copy.spec.name) for copy in copies]
    assert topics[0] != topics[1] and all(copy.topic_aliases == {t: "two.ab"} for copy, t in zip(copies, topics,
                                                                                               strict=True))
    read = [with_aliases(Counter({canonical({"topic": t, "key": 1, "nested": [t]}): 2}), copy.topic_aliases)
            for copy, t in zip(copies, topics, strict=True)]
    assert read[0] == read[1] == Counter({canonical({"topic": "two.ab", "key": 1, "nested": ["two.ab"]}): 2})
    assert with_aliases(Counter({"{\"topic\": \"other\"}": 1}), copies[0].topic_aliases) == Counter(
        {"{\"topic\": \"other\"}": 1})


def test_the_report_has_the_verdict_the_figures_and_a_plot(tmp_path: Path) -> None:
    result = ChaosResult("orders", "orders.yaml", 7, "mixed", 3, str(tmp_path), datetime(2026, 11, 25, tzinfo=UTC))
    result.kills.update({"group": 2, "point": 1})
    result.runs, result.checkpoints, result.checkpoint_times = 4, 3, [1.0, 2.5, 9.0]
    result.events = [ChaosEvent(0.0, "start", 1), ChaosEvent(3.0, "kill", 1, "group"), ChaosEvent(4.0, "point", 2)]
    comparison = OutputComparison("orders", "lake", "parquet", "a", "b")
    comparison.compare(Counter({"x": 1}), Counter({"x": 2}))
    result.outputs.append(comparison)
    lines = summary_lines(result)
    assert lines[0].startswith("chaos FAILED") and "duplicated 1" in lines[2]
    assert "kills landed: 3 of 3 asked (group 2, point 1); runs 4 (3 restarts)" in lines[1]
    # every kind the options could make is listed, 0 when none landed; picks that landed as
    # another kind are shown as picked
    result.kill_kinds, result.picked = ["group", "jvm", "point", "stage"], Counter({"jvm": 2, "point": 1})
    lines = summary_lines(result)
    assert "kills landed: 3 of 3 asked (group 2, jvm 0, point 1, stage 0)" in lines[1]
    assert lines[2] == "  kills picked: jvm 2, point 1 (a JVM kill before the run had a JVM landed as a group kill)"
    json_path, html_path = write_report(result, tmp_path)
    assert '"duplicated": 1' in json_path.read_text()
    assert "data:image/png;base64," in html_path.read_text()


def test_the_upgrade_modes_summary_counts_the_kills_by_step_and_point(tmp_path: Path) -> None:
    result = ChaosResult("orders", "orders.yaml", 7, "group", 3, str(tmp_path), datetime(2026, 11, 25, tzinfo=UTC),
                         kill_kinds=["group", "point"], upgrade_to="new.yaml")
    result.kills.update({"group": 1, "point": 2})
    result.steps.update({"rewrite": 1, "canary": 1, "rollback": 1})
    result.points.update({"after_manifest": 1, "upgrade_mid_rollback": 1})
    result.upgrades = [{"from": "pipeline.yaml", "to": "upgrade.yaml", "outcome": "rolled back", "kills": 3}]
    lines = summary_lines(result)
    assert "  upgrades to new.yaml and back: 1 (rolled back 1)" in lines
    assert ("  kills by step: start 0, rewrite 1, canary 1, commit 0, rollback 1; armed points: after_manifest 1, "
            "upgrade_mid_rollback 1") in lines
    document = result.as_dict()
    assert document["kills_by_step"] == {"rewrite": 1, "canary": 1, "rollback": 1}
    assert document["upgrades"][0]["outcome"] == "rolled back"
    plain = ChaosResult("o", "o.yaml", 1, "group", 1, "", datetime(2026, 1, 1, tzinfo=UTC))
    assert "kills_by_step" not in plain.as_dict()


@pytest.mark.parametrize(("options", "message"), [
    (ChaosOptions(kills=-1), "--kills"),
    (ChaosOptions(kills=1, min_gap=5, max_gap=1), "--min-gap"),
    (ChaosOptions(kills=1, run_timeout=0), "--run-timeout"),
    (ChaosOptions(kills=1, mode="stage"), "needs --processes"),
    (ChaosOptions(kills=1, points=("nowhere",)), "unknown protocol point"),
    # the upgrade mode kills 'barrierflow upgrade' as one process group
    (ChaosOptions(kills=1, upgrade_to=Path("new.yaml"), processes=True), "--processes and --upgrade-to"),
    (ChaosOptions(kills=1, upgrade_to=Path("new.yaml"), mode="jvm"), "--mode jvm and --upgrade-to"),
    (ChaosOptions(kills=1, upgrade_to=Path("new.yaml"), canary_checkpoints=0), "no canary to kill"),
    (ChaosOptions(kills=1, upgrade_to=Path("new.yaml"), kills_per_upgrade=0), "--kills-per-upgrade"),
    (ChaosOptions(kills=1, canary_checkpoints=2), "--canary-checkpoints belong to the upgrade mode"),
    (ChaosOptions(kills=1, points=("upgrade_mid_rollback",)), "only the upgrade mode runs"),
])
def test_bad_options_are_refused_naming_the_option(options: ChaosOptions, message: str) -> None:
    """(``--processes`` for one stage is the pipeline's refusal: test_chaos_refusals.py.)"""
    with pytest.raises(UserInputError, match=message):
        options.check()
