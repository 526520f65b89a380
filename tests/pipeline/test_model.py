"""The opened pipeline (barrierflow.pipeline.model): a single-stage spec is a graph of one stage
whose cuts are derived from its own store; a multi-stage spec gives every stage's derived spec,
store, layout, inputs and back-edges, and the global checkpoint store. No Spark, no broker.

What could go wrong and is checked: a one-stage pipeline whose files would have to move (its
stage store must be the spec's own store, ``chk-<n>`` at the root); stages opened against the
wrong store or work dir; input or back-edge partitions the cut verification would then miss;
a derived cut that disagrees with the stage manifest it stands for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.errors import CheckpointNotFoundError, UserInputError
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS, OWN_CHECKPOINTS
from barrierflow.pipeline.model import OFFLINE_SERVERS, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.spec.loader import load_spec

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory

PROJECT = Path(__file__).resolve().parents[2]


def staged_dict(tmp_path: Path, *, bootstrap: str = "embedded") -> dict[str, Any]:
    """generator -> a -> channel ab (2 partitions) -> b -> Parquet."""
    project = {"function": "barrierflow.transforms.projection:project", "options": {"columns": {"value": "value"}}}
    return {
        "name": "flow", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "bootstrap": bootstrap, "partitions": 2}],
        "stages": [
            {"name": "a", "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                                       "records_per_partition": 10}],
             "transformation": project, "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": {"value": "long"}}],
             "transformation": project,
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"},
    }


def test_a_single_stage_spec_is_one_stage_whose_cuts_are_its_checkpoints(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    manifests = factory.take(2)
    path = write_spec(tmp_path, spec_dict(tmp_path))
    pipeline = open_pipeline(path)

    assert pipeline.layout is OWN_CHECKPOINTS and words(pipeline).cut_noun == "checkpoint" and pipeline.name == "t"
    [stage] = pipeline.stages
    assert stage.name == "t" and stage.spec == load_spec(path)  # the YAML's own spec, not a derived one
    assert stage.input_partitions == frozenset() and not stage.embedded_inputs
    assert stage.layout.work_dir == tmp_path / "work" and pipeline.work_dir == str(tmp_path / "work")
    # Nothing moves: the stage store is the spec's store, chk-<n> at its root, and it is the pipeline's root.
    assert stage.store.uri == factory.store.uri == pipeline.storage and pipeline.root is stage.store
    assert isinstance(pipeline.cuts, SingleStageCuts) and pipeline.cuts.store is stage.store

    assert pipeline.cuts.completed_ids() == [m.checkpoint_id for m in manifests]
    cut = pipeline.cuts.get(manifests[-1].checkpoint_id)
    assert set(cut.stages) == {"t"} and cut.stages["t"].manifest == f"chk-{manifests[-1].checkpoint_id}/_metadata.json"
    assert cut.stages["t"].spark_batch_id == manifests[-1].spark_batch_id
    assert cut.completion_time == manifests[-1].completion_time and cut.attempt == manifests[-1].attempt
    assert pipeline.newest_cut() == cut and pipeline.completed_cut() == manifests[-1].checkpoint_id
    with pytest.raises(CheckpointNotFoundError, match="checkpoint 9 of pipeline t is not complete"):
        pipeline.completed_cut(9)
    assert not (tmp_path / "checkpoints" / "global").exists()  # opening and reading write nothing


def test_a_multi_stage_spec_gives_each_stage_and_the_global_store(tmp_path: Path) -> None:
    pipeline = open_pipeline(write_spec(tmp_path, staged_dict(tmp_path), "flow.yaml"))

    assert pipeline.layout is GLOBAL_CHECKPOINTS and words(pipeline).cut_noun == "global checkpoint"
    assert isinstance(pipeline.cuts, GlobalCheckpointStore) and pipeline.cuts.pipeline == "flow"
    assert pipeline.root is pipeline.cuts.root and pipeline.storage.endswith("/chk")
    assert pipeline.work_dir == str(tmp_path / "work")
    a, b = pipeline.stages
    assert (a.name, b.name) == ("a", "b") and pipeline.stage("b") is b
    assert (a.spec.name, b.spec.name) == ("flow-a", "flow-b")
    assert a.store.uri.endswith("/chk/stages/a") and b.store.uri.endswith("/chk/stages/b")
    assert b.layout.work_dir == tmp_path / "work" / "stages" / "b"
    assert a.input_partitions == frozenset() and not a.embedded_inputs
    assert b.input_partitions == {"flow.ab:0", "flow.ab:1"} and b.back_edge_partitions == frozenset()
    assert b.embedded_inputs and b.spec.source.bootstrap_servers == OFFLINE_SERVERS  # never connected to
    assert pipeline.cuts.completed_ids() == [] and pipeline.newest_cut() is None
    with pytest.raises(CheckpointNotFoundError, match="no completed global checkpoint"):
        pipeline.completed_cut()
    with pytest.raises(UserInputError, match="no stage 'c'; its stages: \\['a', 'b'\\]"):
        pipeline.stage("c")


def test_back_edges_of_a_cycle_are_marked_per_stage() -> None:
    pipeline = open_pipeline(PROJECT / "include" / "pipelines" / "cycle.yaml")
    spec = pipeline.spec
    back = {s.name: s.back_edge_partitions for s in pipeline.stages if s.back_edge_partitions}
    assert back, "the cycle's back-edge reader has no back-edge partitions"
    for stage in pipeline.stages:
        assert stage.back_edge_partitions <= stage.input_partitions
    channels = {c.name: c for c in spec.channels}  # type: ignore[union-attr]
    for name, partitions in back.items():
        topics = {p.rsplit(":", 1)[0] for p in partitions}
        assert all(any(c.topic_for(spec.name) == t for c in channels.values()) for t in topics), (name, topics)
