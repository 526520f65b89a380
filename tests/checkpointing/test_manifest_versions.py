"""Manifest format 2 (``barrier_batch_ms``), version-1 manifests still read; manifests are
added if absent and never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.checkpointing.manifest import MANIFEST_VERSION, CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.errors import CheckpointError
from barrierflow.storage.local import LocalObjectStore

from tests.verification.checkpoint_factory import CheckpointFactory


def _v1(manifest: Manifest) -> dict:
    """The manifest as barrierflow wrote it with format version 1."""
    doc = json.loads(manifest.model_dump_json())
    doc["format_version"] = 1
    doc["alignment_ms"] = doc.pop("barrier_batch_ms")
    return doc


def test_new_manifests_are_version_2_with_barrier_batch_ms(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    [manifest] = factory.take(1)
    stored = json.loads(factory.store.objects.get_bytes(manifest_key(manifest.checkpoint_id)))
    assert MANIFEST_VERSION == 2 and stored["format_version"] == 2
    assert "barrier_batch_ms" in stored and "alignment_ms" not in stored


def test_version_1_manifests_are_still_read(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    [manifest] = factory.take(1)
    old = _v1(manifest.model_copy(update={"barrier_batch_ms": 12.5}))
    key = manifest_key(manifest.checkpoint_id)
    factory.store.objects.put_bytes(key, json.dumps(old).encode())
    read = factory.store.get(manifest.checkpoint_id)
    assert read.barrier_batch_ms == 12.5 and read.format_version == 2
    assert read.model_dump(exclude={"barrier_batch_ms"}) == manifest.model_dump(exclude={"barrier_batch_ms"})
    assert json.loads(factory.store.objects.get_bytes(key)) == old  # read, never rewritten
    assert [m.checkpoint_id for m in factory.store.completed()] == [manifest.checkpoint_id]


def test_a_manifest_is_never_overwritten(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    [manifest] = factory.take(1)
    store = CheckpointStore(LocalObjectStore(tmp_path / "other"), manifest.pipeline)
    assert store.add_manifest(manifest) is True
    changed = manifest.model_copy(update={"spark_batch_id": 99})
    assert store.add_manifest(changed) is False
    with pytest.raises(CheckpointError, match="never overwritten"):
        store.write_manifest(changed)
    assert store.get(manifest.checkpoint_id) == manifest
    promoted = store.promote(manifest.checkpoint_id, CheckpointKind.SAVEPOINT)
    assert store.get(manifest.checkpoint_id) == promoted == manifest.model_copy(update={"kind": "savepoint"})
