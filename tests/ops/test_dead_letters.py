"""Every stage's dead letters, counted where its executors write them (the run summary of both
shapes prints them from :func:`barrierflow.ops.run.dead_letters`)."""

from __future__ import annotations

from pathlib import Path

from barrierflow.ops.run import DeadLetters, dead_letters
from barrierflow.pipeline.model import open_pipeline
from barrierflow.sources.dead_letter import write_dead_letters

from tests.pipeline.test_model import staged_dict
from tests.pipeline_specs import spec_dict, write_spec


def _letters(count: int, start: int = 0) -> list[dict[str, object]]:
    return [{"source": "events", "partition": "0", "offset": start + i, "reason": "not JSON", "payload": "x"}
            for i in range(count)]


def test_each_stage_of_several_counts_its_own_dead_letters(tmp_path: Path) -> None:
    pipeline = open_pipeline(write_spec(tmp_path, staged_dict(tmp_path), "flow.yaml"))
    work = tmp_path / "work" / "stages"
    write_dead_letters(f"file://{work / 'b' / 'dead-letter'}", "events", "0", 0, 3, _letters(3))
    write_dead_letters(f"file://{work / 'b' / 'dead-letter'}", "events", "0", 2, 5, _letters(3, 2))  # a replay
    assert dead_letters(pipeline) == {"a": DeadLetters(0, f"file://{work / 'a' / 'dead-letter'}"),
                                      "b": DeadLetters(5, f"file://{work / 'b' / 'dead-letter'}")}


def test_one_stage_counts_the_spec_dead_letter_path(tmp_path: Path) -> None:
    target = f"file://{tmp_path / 'dl'}"
    pipeline = open_pipeline(write_spec(tmp_path, spec_dict(tmp_path, dead_letter_path=target)))
    write_dead_letters(target, "events", "1", 0, 2, _letters(2))
    assert dead_letters(pipeline) == {"t": DeadLetters(2, target)}
