"""Every option of a stage comes from its pipeline (barrierflow.pipeline.stage_options), no Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.pipeline.stage_options import derive_stage_spec
from barrierflow.sinks.factory import build_sink
from barrierflow.sources.planning import PlanningOptions
from barrierflow.spec import parse_staged_spec
from barrierflow.spec.models import CheckpointMode, KafkaSourceSpec
from barrierflow.transactions.two_phase import TwoPhaseCommitSink
from barrierflow.workdir.layout import JobLayout

CHANNEL_FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}


def pipeline(tmp_path: Path, **checkpoint: Any) -> dict[str, Any]:
    return {
        "name": "opts", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "partitions": 2, "bootstrap": "127.0.0.1:9"},
                     {"name": "cb", "partitions": 1, "bootstrap": "127.0.0.1:9"}],
        "stages": [
            {"name": "a", "sources": [{"type": "generator", "partitions": 2}],
             "transformation": {"function": "barrierflow.transforms.projection:project"},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "c", "sources": [{"type": "generator", "partitions": 1}],
             "transformation": {"function": "barrierflow.transforms.projection:project"},
             "sinks": [{"type": "channel", "channel": "cb"}]},
            {"name": "b",
             "sources": [{"type": "channel", "channel": "ab", "json_fields": CHANNEL_FIELDS},
                         {"type": "channel", "channel": "cb", "json_fields": CHANNEL_FIELDS}],
             "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                                "output_mode": "append"},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "trigger": {"interval": "200ms", "target_batch_duration": "2s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "3s", **checkpoint},
        "event_time": {"column": "event_time", "watermark_delay": "5s", "idle_timeout": "4s",
                       "alignment": {"group": "g", "max_drift": "2s", "update_interval": "1s"}},
        "reports": {"max_skew": "30s"},
    }


SERVERS = {"ab": "127.0.0.1:9", "cb": "127.0.0.1:9"}


def test_every_checkpoint_setting_reaches_every_stage(tmp_path: Path) -> None:
    settings = {"timeout": "77s", "min_pause": "1500ms", "max_concurrent": 2, "tolerable_failed_checkpoints": 3,
                "retained": 4, "mode": "unaligned", "synchronous_upload": True, "async_nice": 11,
                "sink_commit_retries": 9, "sink_commit_backoff": "250ms"}
    spec = parse_staged_spec(pipeline(tmp_path, **settings))
    for stage in spec.stages:
        derived = derive_stage_spec(spec, stage, work_dir=str(tmp_path / "work"), servers=SERVERS)
        got = derived.checkpoint.model_dump()
        want = spec.checkpoint.model_dump()
        assert got.pop("storage") == f"file://{tmp_path / 'chk'}/stages/{stage.name}"
        want.pop("storage")
        assert got == want  # all of them, not a hand-picked few
        assert derived.checkpoint.mode is CheckpointMode.UNALIGNED and derived.checkpoint.min_pause == 1.5
        assert derived.name == f"opts-{stage.name}" and derived.work_dir == f"{tmp_path / 'work'}/stages/{stage.name}"


def test_event_time_planning_and_reports_reach_a_stage_reading_channels(tmp_path: Path) -> None:
    spec = parse_staged_spec(pipeline(tmp_path))
    derived = derive_stage_spec(spec, spec.stage("b"), work_dir=str(tmp_path / "work"), servers=SERVERS)
    planning = PlanningOptions.from_spec(derived)
    assert planning == PlanningOptions(watermark_delay=5.0, idle_timeout=4.0, max_drift=2.0, update_interval=1.0,
                                       group="g", target_batch_duration=2.0)
    assert derived.reports == spec.reports and derived.event_time == spec.event_time
    source = derived.source
    assert source.type == "kafka" and source.topics == ["opts.ab", "opts.cb"]
    assert source.json_fields == CHANNEL_FIELDS


def test_a_final_stages_sink_retries_commits_as_the_pipeline_says(tmp_path: Path) -> None:
    spec = parse_staged_spec(pipeline(tmp_path, sink_commit_retries=9, sink_commit_backoff="250ms"))
    derived = derive_stage_spec(spec, spec.stage("b"), work_dir=str(tmp_path / "work"), servers=SERVERS)
    sink = build_sink(derived, CheckpointStore.for_spec(derived), JobLayout.for_spec(derived), attempt=0)
    assert isinstance(sink, TwoPhaseCommitSink)
    assert sink.commit_retry.retries == 9 and sink.commit_retry.initial == 0.25


def test_channels_with_different_fields_are_read_as_their_union(tmp_path: Path) -> None:
    data = pipeline(tmp_path)
    data["stages"][2]["sources"][1]["json_fields"] = {"key": "long", "amount": "double"}
    spec = parse_staged_spec(data)
    source = derive_stage_spec(spec, spec.stage("b"), work_dir="/w", servers=SERVERS).source
    assert isinstance(source, KafkaSourceSpec)
    assert source.json_fields == {**CHANNEL_FIELDS, "amount": "double"}
    ab, cb = (spec.channel(c).topic_for(spec.name) for c in ("ab", "cb"))
    assert source.topic_fields == {ab: list(CHANNEL_FIELDS), cb: ["key", "amount"]}
    assert source.fields_of(cb) == {"key": "long", "amount": "double"}


def test_a_field_typed_differently_by_two_channels_is_refused_naming_both(tmp_path: Path) -> None:
    data = pipeline(tmp_path)
    data["stages"][2]["sources"][1]["json_fields"] = {"key": "string"}
    spec = parse_staged_spec(data)
    with pytest.raises(UserInputError, match="stage 'b': field 'key' has different types in the json_fields of "
                                             "channels \\['ab', 'cb'\\]"):
        derive_stage_spec(spec, spec.stage("b"), work_dir="/w", servers=SERVERS)


def test_a_derived_name_longer_than_63_characters_is_refused(tmp_path: Path) -> None:
    data = pipeline(tmp_path)
    data["name"] = "p" * 40
    data["stages"][0]["name"] = "s" * 30
    spec = parse_staged_spec(data)
    with pytest.raises(UserInputError, match="longer than 63 characters"):
        derive_stage_spec(spec, spec.stages[0], work_dir="/w", servers=SERVERS)


def test_a_stage_s_own_shuffle_partitions_win_over_the_pipeline_s(tmp_path: Path) -> None:
    from barrierflow.spark.session import shuffle_partitions

    data = pipeline(tmp_path)
    data["spark"] = {"shuffle_partitions": 4, "conf": {"spark.sql.shuffle.partitions": "8", "spark.x": "y"}}
    data["stages"][2]["shuffle_partitions"] = 2
    spec = parse_staged_spec(data)
    derived = {s.name: derive_stage_spec(spec, s, work_dir=str(tmp_path / "work"), servers=SERVERS).spark
               for s in spec.stages}
    assert {name: shuffle_partitions(s) for name, s in derived.items()} == {"a": "8", "c": "8", "b": "2"}
    assert derived["b"].conf == {"spark.x": "y"} and derived["a"] == spec.spark
