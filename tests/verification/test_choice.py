"""The one checkpoint-choice rule (barrierflow.verification.choice) on both shapes, without
Spark: checkpoints made by the real coordinator on a hand-written Spark dir
(tests/verification/checkpoint_factory.py); for two stages, each stage's store so made and the
global manifests written over them as the pipeline coordinator writes them.

What could go wrong and is checked: a damaged newest cut restored by ``latest`` (it must be
refused naming the check, and for several stages the stage), ``latest-valid`` not stepping
over it or not saying why, an unknown id accepted, one stage judged by cut checks it has no
records for (a one-stage pipeline has no ``global/``), and the two shapes disagreeing on the
error types the CLI and the recovery DAG turn into exit codes and task failures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key, stage_prefix
from barrierflow.checkpointing.global_store import stage_snapshot
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import manifest_key, shared_key
from barrierflow.errors import CheckpointNotFoundError
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.storage.local import LocalObjectStore
from barrierflow.verification.choice import (
    CUT_VERIFICATION,
    LATEST,
    LATEST_VALID,
    ChosenCheckpointInvalidError,
    choose_checkpoint,
)

from tests.pipeline.test_model import staged_dict
from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory


def _flip_state_byte(root: Path, manifest: Manifest) -> None:
    """Alter one state file ``manifest`` uploaded (kept size: only the sha256 shows it)."""
    entry = manifest.file(f"state/0/1/{manifest.state_version}.delta")
    assert entry is not None and entry.uploaded
    target = root / shared_key(entry.sha256)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))


def test_one_stage_no_cut_checks_its_own_structural_verification(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    manifests = factory.take(3)
    pipeline = open_pipeline(write_spec(tmp_path, spec_dict(tmp_path)))

    chosen = choose_checkpoint(pipeline, LATEST)
    assert (chosen.checkpoint_id, chosen.verification, chosen.pipeline) == (3, "passed structural verification", "t")
    assert not (tmp_path / "checkpoints" / "global").exists()  # no cut records for one stage

    _flip_state_byte(tmp_path / "checkpoints", manifests[-1])
    with pytest.raises(ChosenCheckpointInvalidError) as refused:
        choose_checkpoint(pipeline, LATEST)
    assert refused.value.checkpoint_id == 3 and [name for name, _ in refused.value.failures] == ["file"]
    assert "checkpoint 3 of pipeline 't' (requested as checkpoint='latest') fails verification" in str(refused.value)
    assert "failed the file check: state/0/1/" in str(refused.value) and "sha256 mismatch" in str(refused.value)

    valid = choose_checkpoint(pipeline, LATEST_VALID)
    assert valid.checkpoint_id == 2 and [cid for cid, _ in valid.skipped] == [3]
    assert "sha256 mismatch" in valid.skipped[0][1]
    assert valid.verification == "the newest checkpoint that passes structural verification"
    assert choose_checkpoint(pipeline, 1).checkpoint_id == 1
    with pytest.raises(CheckpointNotFoundError, match="checkpoint 7 of pipeline t does not exist"):
        choose_checkpoint(pipeline, 7)


def _two_stage_cuts(tmp_path: Path, count: int, *, bootstrap: str = "embedded"
                    ) -> tuple[OpenedPipeline, dict[str, list[Manifest]]]:
    """``count`` cuts of the two-stage pipeline of tests/pipeline/test_model.py: each stage's
    checkpoints, b's with its barrier positions in both channel partitions, and the global
    manifest naming them."""
    pipeline = open_pipeline(write_spec(tmp_path, staged_dict(tmp_path, bootstrap=bootstrap), "flow.yaml"))
    manifests: dict[str, list[Manifest]] = {}
    for stage in pipeline.stages:
        objects = LocalObjectStore(tmp_path / "chk" / "stages" / stage.name)
        factory = CheckpointFactory(tmp_path / f"factory-{stage.name}", objects=objects, pipeline=stage.spec.name)
        manifests[stage.name] = factory.take(count)
    for m in manifests["b"]:  # what b's source records at the barrier of a stage fed by a channel
        data = json.loads(m.model_dump_json())
        data["alignment"] = {"mode": "aligned", "alignment_ms": 1.5,
                             "barrier_offsets": {"flow.ab:0": 10 * m.checkpoint_id, "flow.ab:1": 10 * m.checkpoint_id}}
        (tmp_path / "chk" / "stages" / "b" / manifest_key(m.checkpoint_id)).write_text(json.dumps(data))
    for cid in range(1, count + 1):
        parts = {name: stage_snapshot(stage_prefix(name), ms[cid - 1]) for name, ms in manifests.items()}
        a = manifests["a"][cid - 1]
        cut = GlobalManifest(pipeline="flow", checkpoint_id=cid, attempt=0, trigger_time=a.trigger_time,
                             completion_time=a.completion_time, total_ms=a.total_ms, stages=parts)
        key = tmp_path / "chk" / global_key(cid, "_metadata")
        key.parent.mkdir(parents=True)
        key.write_text(cut.model_dump_json())
    return pipeline, manifests


def test_several_stages_a_cut_is_verified_whole(tmp_path: Path) -> None:
    pipeline, manifests = _two_stage_cuts(tmp_path, 2)

    chosen = choose_checkpoint(pipeline, LATEST)
    assert (chosen.checkpoint_id, chosen.verification, chosen.pipeline) == (2, CUT_VERIFICATION, "flow")

    _flip_state_byte(tmp_path / "chk" / "stages" / "a", manifests["a"][-1])
    with pytest.raises(ChosenCheckpointInvalidError) as refused:
        choose_checkpoint(pipeline, LATEST)
    assert refused.value.checkpoint_id == 2 and [name for name, _ in refused.value.failures] == ["a: file"]
    assert "global checkpoint 2 of pipeline 'flow' (requested as checkpoint='latest')" in str(refused.value)

    valid = choose_checkpoint(pipeline, LATEST_VALID)
    assert valid.checkpoint_id == 1 and [cid for cid, _ in valid.skipped] == [2]
    assert "a: file: " in valid.skipped[0][1] and "sha256 mismatch" in valid.skipped[0][1]
    with pytest.raises(CheckpointNotFoundError, match="global checkpoint 5 of pipeline 'flow' is not complete"):
        choose_checkpoint(pipeline, 5)

    # A stage checkpoint the cut names is gone: the cut fails as a whole, never passes on fewer stages.
    (tmp_path / "chk" / "stages" / "b" / manifest_key(1)).unlink()
    with pytest.raises(CheckpointNotFoundError, match="no global checkpoint that passes verification") as none:
        choose_checkpoint(pipeline, LATEST_VALID)
    assert "b: manifest: stage b's checkpoint 1 is missing" in str(none.value)
