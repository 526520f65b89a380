"""``transformation.ttl`` and ``emit_on_expiry`` in a spec: parsed as a duration, refused with
the field and the fix where they cannot work, the same for a single stage and every stage of
a pipeline of several; and what the transformation's context says of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SpecError
from barrierflow.spec import load_spec, parse_any_spec, parse_spec
from barrierflow.transforms.context import TransformContext, load_transformation

from tests.pipeline_specs import spec_dict

TTL_TOTALS = {"function": "barrierflow.transforms.aggregations:keyed_running_totals", "output_mode": "update",
              "ttl": "5 minutes", "emit_on_expiry": True}
EVENT_TIME = {"column": "event_time", "watermark_delay": "10s"}
ROCKSDB = {"state_store": "rocksdb"}


def _single(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return spec_dict(tmp_path, **{"transformation": TTL_TOTALS, "event_time": EVENT_TIME, "spark": ROCKSDB,
                                  **overrides})


def _staged(tmp_path: Path, second: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    stage = {"sources": [{"name": "events", "type": "generator", "partitions": 1, "rows_per_second": 0,
                          "records_per_partition": 10}],
             "sinks": [{"name": "out", "type": "discard"}]}
    data = {"name": "p", "work_dir": str(tmp_path / "w"),
            "checkpoint": {"storage": f"file://{tmp_path / 'c'}"}, "event_time": EVENT_TIME, "spark": ROCKSDB,
            "stages": [{"name": "first", **stage, "transformation": TTL_TOTALS},
                       {"name": "second", **stage, "transformation": second}]}
    data.update(overrides)
    return data


def test_a_ttl_is_a_duration_the_context_gives_in_seconds(tmp_path: Path) -> None:
    spec = parse_spec(_single(tmp_path))
    context = TransformContext(spec, {})
    assert (context.ttl_seconds, context.emit_on_expiry, context.output_mode) == (300.0, True, "update")
    plain = TransformContext(parse_spec(spec_dict(tmp_path)), {})
    assert (plain.ttl_seconds, plain.emit_on_expiry) == (None, False)


@pytest.mark.parametrize(("change", "field", "fix"), [
    ({"event_time": None}, "transformation.ttl needs event_time", "add event_time.column"),
    ({"spark": {"state_store": "hdfs"}}, "transformation.ttl needs RocksDB state", "spark.state_store: rocksdb"),
    ({"transformation": {**TTL_TOTALS, "ttl": "0s"}}, "ttl must be greater than 0", "10 minutes"),
    ({"transformation": {**TTL_TOTALS, "ttl": "soon"}}, "expected a duration", "2 minutes"),
    ({"transformation": {**TTL_TOTALS, "ttl": None}}, "emit_on_expiry is set without ttl", "remove emit_on_expiry"),
    ({"transformation": {**TTL_TOTALS, "output_mode": "complete"}}, "transformation.ttl with output_mode complete",
     "use output_mode update"),
])
def test_a_ttl_that_cannot_work_is_refused_naming_the_field_and_the_fix(
        tmp_path: Path, change: dict[str, Any], field: str, fix: str) -> None:
    data = _single(tmp_path, **change)
    if data.get("event_time") is None:
        data.pop("event_time")
    with pytest.raises(SpecError) as refused:
        parse_spec(data)
    assert field in str(refused.value) and fix in str(refused.value)


def test_every_stage_of_a_pipeline_is_checked_and_named(tmp_path: Path) -> None:
    pipeline = parse_any_spec(_staged(tmp_path, {**TTL_TOTALS, "ttl": "1 minute", "emit_on_expiry": False}))
    assert [s.transformation.ttl for s in pipeline.stages] == [300.0, 60.0]
    with pytest.raises(SpecError) as refused:
        parse_any_spec(_staged(tmp_path, TTL_TOTALS, spark={"state_store": "hdfs"}))
    assert "stages.0.transformation (stage 'first').ttl needs RocksDB state" in str(refused.value)
    no_event_time = _staged(tmp_path, TTL_TOTALS)
    no_event_time.pop("event_time")
    with pytest.raises(SpecError, match=r"stages\.0\.transformation \(stage 'first'\)\.ttl needs event_time"):
        parse_any_spec(no_event_time)


def test_a_function_that_does_not_support_ttl_is_refused_when_loaded(tmp_path: Path) -> None:
    spec = parse_spec(_single(tmp_path, transformation={
        "function": "barrierflow.transforms.aggregations:keyed_window_counts", "ttl": "1m"}))
    with pytest.raises(SpecError) as refused:
        load_transformation(spec, "pipeline.yaml")
    message = str(refused.value)
    assert "transformation.ttl" in message and "keyed_window_counts does not support ttl" in message
    assert "deduplicate_by_key" in message and "supports_ttl" in message
    for function in ("barrierflow.transforms.aggregations:keyed_running_totals",
                     "barrierflow.transforms.deduplication:deduplicate_by_key"):
        ok = parse_spec(_single(tmp_path, transformation={"function": function, "ttl": "1m"}))
        assert callable(load_transformation(ok))


def test_the_yaml_form(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    import yaml
    path.write_text(yaml.safe_dump(_single(tmp_path, transformation={**TTL_TOTALS, "ttl": "90s"})), encoding="utf-8")
    assert load_spec(path).transformation.ttl == 90.0
