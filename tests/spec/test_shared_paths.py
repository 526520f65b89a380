"""The paths executors write (dead letters, Kafka event times) as spec fields: storage URIs,
defaulting to the work dir; in a multi-stage spec the pipeline's URI with a part per stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SpecError
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.spec import parse_staged_spec
from barrierflow.spec.loader import parse_spec
from barrierflow.spec.models import StageSpec
from barrierflow.workdir.layout import JobLayout


def _single(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"name": "paths", "work_dir": str(tmp_path / "work"),
            "sources": [{"name": "events", "type": "generator", "partitions": 1}],
            "transformation": {"function": "barrierflow.transforms.projection:project",
                               "options": {"columns": {"key": "key"}}},
            "sinks": [{"type": "discard"}], "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}, **extra}


def _staged(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    columns = {"options": {"columns": {"key": "key"}}, "function": "barrierflow.transforms.projection:project"}
    return {"name": "paths", "work_dir": str(tmp_path / "work"),
            "channels": [{"name": "ab", "bootstrap": "127.0.0.1:9"}],
            "stages": [{"name": "a", "sources": [{"name": "events", "type": "generator", "partitions": 1}],
                        "transformation": columns, "sinks": [{"type": "channel", "channel": "ab"}]},
                       {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}],
                        "transformation": columns, "sinks": [{"type": "discard"}]}],
            "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}, **extra}


def test_single_stage_defaults_are_in_the_work_dir_and_s3_uris_are_taken(tmp_path: Path) -> None:
    spec = StageSpec.model_validate(_single(tmp_path))
    layout = JobLayout.for_spec(spec)
    assert layout.dead_letter_uri(spec) == f"file://{tmp_path / 'work' / 'dead-letter'}"
    assert layout.event_time_uri(spec) == f"file://{tmp_path / 'work' / 'event-times'}"
    spec = StageSpec.model_validate(_single(tmp_path, dead_letter_path="s3://lake/dl",
                                               event_times_path="s3://lake/et"))
    assert (layout.dead_letter_uri(spec), layout.event_time_uri(spec)) == ("s3://lake/dl", "s3://lake/et")


@pytest.mark.parametrize("field", ["dead_letter_path", "event_times_path"])
def test_a_path_that_is_no_storage_uri_is_refused_naming_the_field(tmp_path: Path, field: str) -> None:
    with pytest.raises(SpecError) as single:
        parse_spec(_single(tmp_path, **{field: "/shared/dl"}))
    with pytest.raises(SpecError) as staged:
        parse_staged_spec(_staged(tmp_path, **{field: "s3://"}))
    assert f"{field}: expected a storage URI" in str(single.value)
    assert f"{field}: an s3:// URI needs a bucket" in str(staged.value)


def test_each_stage_writes_below_its_part_of_the_pipelines_uris(tmp_path: Path) -> None:
    job = StagedPipelineJob(parse_staged_spec(_staged(tmp_path, dead_letter_path="s3://lake/p/dl/",
                                                      event_times_path="s3://lake/p/et")))
    paths = {s.stage.name: (s.layout.dead_letter_uri(s.spec), s.layout.event_time_uri(s.spec)) for s in job.stages}
    assert paths == {name: (f"s3://lake/p/dl/stages/{name}", f"s3://lake/p/et/stages/{name}") for name in "ab"}
    job = StagedPipelineJob(parse_staged_spec(_staged(tmp_path)))
    paths = {s.stage.name: (s.layout.dead_letter_uri(s.spec), s.layout.event_time_uri(s.spec)) for s in job.stages}
    work = tmp_path / "work" / "stages"
    assert paths == {n: (f"file://{work / n / 'dead-letter'}", f"file://{work / n / 'event-times'}") for n in "ab"}
