"""The parts of the new savepoint cut an upgrade records, one per stage of the new spec.

``barrierflow upgrade`` (:mod:`barrierflow.upgrade.steps`) never modifies the savepoint it starts
from (Flink's NO_CLAIM): it records a new savepoint cut under a new id (:func:`next_cut_id`),
every stage of the new spec given a manifest of that id, written by the pipeline's cuts
(``record_cut`` of :class:`~barrierflow.checkpointing.global_store.GlobalCheckpointStore`: the
stage manifests, then the global manifest; of
:class:`~barrierflow.checkpointing.global_store.SingleStageCuts`: the one stage's manifest, which
is the cut):

* a stage rescaled: its rewritten Spark checkpoint, uploaded (:func:`rescaled_savepoint`);
* a stage kept as it is: the source manifest under the new id, the same files (nothing is
  uploaded; :func:`carry_savepoint`);
* a stage whose compatibility was assumed (``--assume-compatible``: state without a recorded
  fingerprint): the source manifest's files under the new id with the new spec's fingerprint
  added, marked as assumed, so the next run compares by fingerprint (:func:`assumed_savepoint`);
* a stage added: a manifest without files and barrier batch -1
  (:attr:`~barrierflow.checkpointing.manifest.Manifest.starts_empty`): a restore gives it an
  empty Spark checkpoint, so its query starts on empty state; its barrier position in each
  input partition is -1 (the beginning: the channels it reads are new, nothing older attempts
  wrote there is read; :func:`empty_savepoint`);
* a stage dropped: no part in the new cut (its store is left as it is).

The stages read by channels keep the barrier positions of the source cut; the barrier records
there carry the source cut's id, which their alignment names
(:attr:`~barrierflow.checkpointing.manifest.AlignmentSummary.barrier_checkpoint_id`), so the
restore's barrier check and attempt cutoffs stay those of the source cut. The rewritten batch
V+1 of a rescale read no input, so its barrier offsets are V's.

The cut's record is written last: before it, the new stage manifests belong to no cut and are
never restored (a rerun takes the next free id); after it, the new cut is the newest.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.checkpointing.manifest import AlignmentSummary, CheckpointKind, Manifest, ManifestFile
from barrierflow.checkpointing.snapshot import STATE_FINGERPRINT
from barrierflow.checkpointing.uploader import sha256_file
from barrierflow.pipeline.model import Stage

__all__ = ["assumed_savepoint", "carry_savepoint", "empty_savepoint", "next_cut_id", "rescaled_savepoint"]


def _carried_alignment(source: Manifest) -> AlignmentSummary | None:
    """The source's alignment, naming the checkpoint whose barrier records it points at."""
    if source.alignment is None:
        return None
    return source.alignment.model_copy(
        update={"barrier_checkpoint_id": source.alignment.barrier_id(source.checkpoint_id)})


def rescaled_savepoint(stage: Stage, source: Manifest, files: list[str], directory: Path, batch_id: int,
                       bases: dict[str, int], *, checkpoint_id: int) -> Manifest:
    """Upload the rewritten copy's ``files`` to ``stage``'s shared files and make their manifest
    the savepoint ``checkpoint_id`` (not written: the cut's ``record_cut`` writes it), resuming
    at ``batch_id + 1`` with the source savepoint's barrier offsets (the repartition batch read
    no input)."""
    store = stage.store
    known = store.shared_digests()
    entries: list[ManifestFile] = []
    uploaded = 0
    for relpath in files:
        path = directory / relpath
        digest = sha256_file(str(path))
        size = path.stat().st_size
        fresh = digest not in known
        if fresh:
            store.put_shared(digest, str(path))
            known.add(digest)
            uploaded += size
        entries.append(ManifestFile(path=relpath, sha256=digest, size=size, uploaded=fresh))
    now = datetime.now(UTC)
    return source.model_copy(update={
        "checkpoint_id": checkpoint_id,
        "kind": CheckpointKind.SAVEPOINT, "attempt": store.attempt(), "spark_batch_id": batch_id,
        "first_batch_id": batch_id, "state_version": batch_id + 1, "trigger_time": now, "barrier_time": now,
        "completion_time": now, "barrier_batch_ms": 0.0, "sync_ms": 0.0, "async_ms": 0.0, "total_ms": 0.0,
        "files": entries, "state_bases": bases, "full_bytes": sum(e.size for e in entries),
        "incremental_bytes": uploaded, "sink_handles": [], "alignment": _carried_alignment(source)})


def carry_savepoint(stage: Stage, source: Manifest, checkpoint_id: int) -> Manifest:
    """``source`` (a stage's part of the source cut) as the savepoint ``checkpoint_id`` of
    ``stage``: the same files and positions, nothing uploaded. Its sink handles are left out:
    the source savepoint's transactions are committed (the new id has none)."""
    now = datetime.now(UTC)
    return source.model_copy(update={
        "checkpoint_id": checkpoint_id, "kind": CheckpointKind.SAVEPOINT, "attempt": stage.store.attempt(),
        "trigger_time": now, "barrier_time": now, "completion_time": now,
        "files": [f.model_copy(update={"uploaded": False}) for f in source.files], "incremental_bytes": 0,
        "sink_handles": [], "alignment": _carried_alignment(source)})


def assumed_savepoint(stage: Stage, source: Manifest, checkpoint_id: int, fingerprint: list[dict[str, Any]], *,
                      new_spec: str, scratch: str | None = None) -> Manifest:
    """:func:`carry_savepoint` of ``source``, whose state has no recorded fingerprint, with
    ``fingerprint`` (the new spec's stateful operators) recorded as its ``barrierflow-state.json``,
    marked as assumed compatible (``--assume-compatible``: when, and for which spec): the next
    run of the stage compares by it. The document is uploaded to the stage's shared files."""
    carried = carry_savepoint(stage, source, checkpoint_id)
    now = datetime.now(UTC)
    document = {"version": 1, "stateful_operators": fingerprint,
                "assumed_compatible": {"at": now.isoformat(), "spec": str(new_spec), "from_savepoint":
                                       source.checkpoint_id}}
    store = stage.store
    with tempfile.TemporaryDirectory(prefix="barrierflow-assumed-", dir=scratch) as folder:
        path = Path(folder) / STATE_FINGERPRINT
        path.write_text(json.dumps(document, indent=1, sort_keys=True), encoding="utf-8")
        digest, size = sha256_file(str(path)), path.stat().st_size
        fresh = digest not in store.shared_digests()
        if fresh:
            store.put_shared(digest, str(path))
    entry = ManifestFile(path=STATE_FINGERPRINT, sha256=digest, size=size, uploaded=fresh)
    files = [f for f in carried.files if f.path != STATE_FINGERPRINT] + [entry]
    return carried.model_copy(update={"files": files, "full_bytes": sum(f.size for f in files),
                                      "incremental_bytes": size if fresh else 0})


def empty_savepoint(stage: Stage, checkpoint_id: int) -> Manifest:
    """The first savepoint of ``stage``, added by the upgrade: no files, barrier batch -1
    (:attr:`Manifest.starts_empty`), and for a stage read by channels the position -1 in each
    input partition (its channels are new: everything in them is of the new attempt)."""
    now = datetime.now(UTC)
    alignment = None
    if stage.input_partitions:
        alignment = AlignmentSummary(mode="aligned", alignment_ms=0.0,
                                     barrier_offsets=dict.fromkeys(sorted(stage.input_partitions), -1))
    return Manifest(pipeline=stage.spec.name, checkpoint_id=checkpoint_id, kind=CheckpointKind.SAVEPOINT,
                    attempt=stage.store.attempt(), spark_batch_id=-1, first_batch_id=0, state_version=0,
                    barrier_offsets={}, max_event_time={}, trigger_time=now, barrier_time=now, completion_time=now,
                    barrier_batch_ms=0.0, sync_ms=0.0, async_ms=0.0, total_ms=0.0, full_bytes=0,
                    incremental_bytes=0, files=[], alignment=alignment)


def next_cut_id(cuts: GlobalCheckpointStore | SingleStageCuts, stages: Sequence[Stage]) -> int:
    """An id no cut record and no stage store of ``stages`` has used."""
    return max([cuts.highest_used_id(), *(s.store.highest_used_id() for s in stages)]) + 1
