"""GlobalCheckpointStore, the one owner of ``global/`` and ``_cutoffs.json``, on a real local
store (one test on S3): add-if-absent global manifests, ids, typed attempt cutoffs (and the
legacy ``_fences.json`` of earlier releases), corrupt records, and the one-stage view over a
stage store (no Spark)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from barrierflow.checkpointing.errors import GlobalManifestExistsError
from barrierflow.checkpointing.global_manifest import (
    GlobalFailure,
    GlobalManifest,
    GlobalTrigger,
    StageSnapshot,
    global_key,
)
from barrierflow.checkpointing.global_store import (
    CUTOFFS_KEY,
    LEGACY_CUTOFFS_KEY,
    AttemptCutoffRecord,
    GlobalCheckpointStore,
    SingleStageCuts,
)
from barrierflow.checkpointing.manifest import FailureReason, FailureRecord, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import BarrierflowError, CheckpointCorruptError, CheckpointNotFoundError
from barrierflow.storage import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def global_manifest(checkpoint_id: int, *, total_ms: float = 5.0) -> GlobalManifest:
    snapshot = StageSnapshot(manifest=f"stages/a/chk-{checkpoint_id}/_metadata.json", spark_batch_id=checkpoint_id,
                             sync_ms=1.0, async_ms=2.0)
    return GlobalManifest(pipeline="p", checkpoint_id=checkpoint_id, attempt=0, trigger_time=T0, completion_time=T0,
                          total_ms=total_ms, stages={"a": snapshot})


def trigger(checkpoint_id: int) -> GlobalTrigger:
    return GlobalTrigger(pipeline="p", checkpoint_id=checkpoint_id, attempt=0, trigger_time=T0)


def stage_manifest(checkpoint_id: int) -> Manifest:
    return Manifest(pipeline="p-a", checkpoint_id=checkpoint_id, attempt=0, spark_batch_id=checkpoint_id + 10,
                    first_batch_id=0, state_version=checkpoint_id + 1, barrier_offsets={}, max_event_time={},
                    trigger_time=T0, barrier_time=T0, completion_time=T0, barrier_batch_ms=1.0, sync_ms=2.0,
                    async_ms=3.0, total_ms=4.0, full_bytes=0, incremental_bytes=0, files=[])


@pytest.fixture
def store(tmp_path: Path) -> GlobalCheckpointStore:
    return GlobalCheckpointStore(open_store(f"file://{tmp_path / 'chk'}"), "p")


def test_a_second_manifest_for_the_same_id_is_refused_and_the_first_stays(
        store: GlobalCheckpointStore, tmp_path: Path) -> None:
    store.write_manifest(global_manifest(1, total_ms=5.0))
    with pytest.raises(GlobalManifestExistsError, match="global checkpoint 1 of pipeline p already has a manifest"):
        store.write_manifest(global_manifest(1, total_ms=99.0))
    assert issubclass(GlobalManifestExistsError, BarrierflowError)
    assert store.add_manifest(global_manifest(1, total_ms=77.0)) is False
    assert store.get(1).total_ms == 5.0  # the first writer's manifest, untouched
    on_disk = GlobalManifest.model_validate_json((tmp_path / "chk" / global_key(1, "_metadata")).read_bytes())
    assert on_disk.total_ms == 5.0
    assert store.add_manifest(global_manifest(2)) is True


def test_ids_completed_unfinished_and_abandoned(store: GlobalCheckpointStore) -> None:
    for cid in (1, 2, 3, 4, 5):
        store.record_trigger(trigger(cid))
    for cid in (1, 2, 4):
        store.write_manifest(global_manifest(cid))
    store.record_failure(GlobalFailure(pipeline="p", checkpoint_id=3, reason="EXPIRED", message="slow",
                                       failure_time=T0))
    store.objects.put_bytes("global/chk-6/unrelated.txt", b"x")  # not a record: ignored by ids
    assert store.completed_ids() == [1, 2, 4]
    assert store.unfinished_ids() == [5]
    assert store.highest_used_id() == 5
    assert store.status(3) == "failed" and store.status(5) == "in flight or abandoned" and store.status(9) == "unknown"
    store.root.begin_attempt([4])
    assert store.completed_ids() == [1, 2]  # 4 was abandoned by a restore
    assert store.ids("_metadata") == [1, 2, 4] and [m.checkpoint_id for m in store.all_manifests()] == [1, 2, 4]
    assert [m.checkpoint_id for m in store.completed()] == [1, 2]
    assert store.attempt() == 1 and store.abandoned() == [4]
    assert [f.checkpoint_id for f in store.failures()] == [3]
    assert store.trigger(5) == trigger(5) and store.trigger(7) is None
    assert sorted(store.objects_by_id()) == [1, 2, 3, 4, 5, 6]
    assert store.exists(6) and not store.exists(7)
    with pytest.raises(CheckpointNotFoundError, match=r"global checkpoint 5 .* not complete \(in flight"):
        store.get(5)


def test_cutoffs_round_trip_typed_in_the_on_disk_format(store: GlobalCheckpointStore, tmp_path: Path) -> None:
    assert CUTOFFS_KEY == "_cutoffs.json"
    assert store.cutoffs() == [] and not store.has_records()
    store.add_cutoff(AttemptCutoffRecord(1, 0, {"z": {"c1:0": -1, "c1:1": -1}}))
    store.add_cutoff(AttemptCutoffRecord(2, 3, {"z": {"c1:1": 40, "c1:0": 17}, "y": {"c0:0": 5}}))
    cutoffs = store.cutoffs()
    assert cutoffs == [AttemptCutoffRecord(1, 0, {"z": {"c1:0": -1, "c1:1": -1}}),
                       AttemptCutoffRecord(2, 3, {"y": {"c0:0": 5}, "z": {"c1:0": 17, "c1:1": 40}})]
    assert isinstance(cutoffs[1].stages["z"]["c1:0"], int)
    # the on-disk format: a JSON list of {"attempt", "restored", "stages"}, keys sorted
    raw = json.loads((tmp_path / "chk" / CUTOFFS_KEY).read_text(encoding="utf-8"))
    assert raw == [{"attempt": 1, "restored": 0, "stages": {"z": {"c1:0": -1, "c1:1": -1}}},
                   {"attempt": 2, "restored": 3, "stages": {"y": {"c0:0": 5}, "z": {"c1:0": 17, "c1:1": 40}}}]
    assert not (tmp_path / "chk" / LEGACY_CUTOFFS_KEY).exists()
    assert store.stage_cutoffs("z") == [{"attempt": 1, "offsets": {"c1:0": -1, "c1:1": -1}},
                                        {"attempt": 2, "offsets": {"c1:0": 17, "c1:1": 40}}]
    assert store.stage_cutoffs("y") == [{"attempt": 2, "offsets": {"c0:0": 5}}]
    assert store.has_records()


def test_a_store_of_an_earlier_release_keeps_its_cutoffs_in_the_legacy_fences_file(
        store: GlobalCheckpointStore, tmp_path: Path) -> None:
    # a store written by a release before the rename: the same JSON list, as _fences.json
    assert LEGACY_CUTOFFS_KEY == "_fences.json"
    legacy = [{"attempt": 1, "restored": 0, "stages": {"z": {"c1:0": -1, "c1:1": -1}}}]
    (tmp_path / "chk").mkdir(parents=True, exist_ok=True)
    legacy_bytes = json.dumps(legacy, indent=2).encode()
    (tmp_path / "chk" / LEGACY_CUTOFFS_KEY).write_bytes(legacy_bytes)
    assert store.has_records()  # the pipeline ran before, though it has no _cutoffs.json yet
    assert store.cutoffs() == [AttemptCutoffRecord(1, 0, {"z": {"c1:0": -1, "c1:1": -1}})]
    assert store.stage_cutoffs("z") == [{"attempt": 1, "offsets": {"c1:0": -1, "c1:1": -1}}]
    # the next restore appends to what the legacy file held and writes _cutoffs.json only
    store.add_cutoff(AttemptCutoffRecord(2, 3, {"z": {"c1:0": 17, "c1:1": 40}}))
    raw = json.loads((tmp_path / "chk" / CUTOFFS_KEY).read_text(encoding="utf-8"))
    assert raw == [legacy[0], {"attempt": 2, "restored": 3, "stages": {"z": {"c1:0": 17, "c1:1": 40}}}]
    assert (tmp_path / "chk" / LEGACY_CUTOFFS_KEY).read_bytes() == legacy_bytes  # left untouched
    # from then on _cutoffs.json is the one read, even if the legacy file says something else
    (tmp_path / "chk" / LEGACY_CUTOFFS_KEY).write_text("[]", encoding="utf-8")
    assert [c.attempt for c in store.cutoffs()] == [1, 2]
    assert store.stage_cutoffs("z")[-1] == {"attempt": 2, "offsets": {"c1:0": 17, "c1:1": 40}}


@pytest.mark.parametrize("key", [CUTOFFS_KEY, LEGACY_CUTOFFS_KEY])
@pytest.mark.parametrize("body", [b"{not json", b'{"attempt": 1}', b'[{"restored": 0}]', b'[{"attempt": 1, '
                                  b'"stages": {"z": {"c1:0": "x"}}}]'])
def test_a_corrupt_cutoffs_file_names_the_object(store: GlobalCheckpointStore, key: str, body: bytes) -> None:
    store.objects.put_bytes(key, body)
    with pytest.raises(CheckpointCorruptError, match=rf"/{re.escape(key)} is not a list of attempt cutoffs"):
        store.cutoffs()


def test_a_corrupt_global_manifest_names_the_object(store: GlobalCheckpointStore) -> None:
    store.objects.put_bytes(global_key(1, "_metadata"), b'{"pipeline": "p"}')
    with pytest.raises(CheckpointCorruptError, match=r"global/chk-1/_metadata\.json is not a valid GlobalManifest"):
        store.get(1)
    store.objects.put_bytes(global_key(1, "_metadata"), global_manifest(1).model_dump_json().encode())
    store.objects.put_bytes(global_key(2, "_metadata"), b"\x00truncated")
    with pytest.raises(CheckpointCorruptError, match=r"global/chk-2/_metadata\.json"):
        store.completed()
    store.objects.put_bytes(global_key(3, "_failed"), b"{}")
    with pytest.raises(CheckpointCorruptError, match=r"global/chk-3/_failed\.json is not a valid GlobalFailure"):
        store.failures()


def test_single_stage_cuts_are_the_stage_checkpoints(tmp_path: Path) -> None:
    stage = CheckpointStore(open_store(f"file://{tmp_path / 'one'}"), "p-a")
    for cid in (1, 2):
        stage.write_manifest(stage_manifest(cid))
    stage.record_failure(FailureRecord(pipeline="p-a", checkpoint_id=3, reason=FailureReason.EXPIRED,
                                       message="too slow", trigger_time=T0, failure_time=T0))
    cuts = SingleStageCuts("a", stage)
    assert cuts.completed_ids() == [1, 2]
    completed = cuts.completed()
    assert [c.checkpoint_id for c in completed] == [1, 2]
    assert all(list(c.stages) == ["a"] for c in completed)
    assert completed[1].stages["a"].manifest == "chk-2/_metadata.json"
    assert completed[1].stages["a"].spark_batch_id == 12 and completed[1].pipeline == "p-a"
    assert cuts.get(1) == completed[0]
    (failure,) = cuts.failures()
    assert failure.checkpoint_id == 3 and failure.reason == "STAGE_FAILED" and failure.message == "EXPIRED: too slow"
    assert cuts.status(2) == "completed" and cuts.status(3) == "failed" and cuts.status(4) == "unknown"
    assert cuts.cutoffs() == [] and cuts.attempt() == 0 and cuts.abandoned() == []


def test_add_if_absent_on_s3(s3_store_uri: str) -> None:
    store = GlobalCheckpointStore(open_store(s3_store_uri), "p")
    store.record_trigger(trigger(1))
    store.write_manifest(global_manifest(1, total_ms=5.0))
    with pytest.raises(GlobalManifestExistsError):
        store.write_manifest(global_manifest(1, total_ms=6.0))
    assert store.get(1).total_ms == 5.0 and store.completed_ids() == [1] and store.unfinished_ids() == []
    store.add_cutoff(AttemptCutoffRecord(1, 1, {"b": {"c:0": 3}}))
    assert store.cutoffs() == [AttemptCutoffRecord(1, 1, {"b": {"c:0": 3}})]
