"""The synchronous phase of a checkpoint: a local, consistent snapshot of batch V.

After Spark wrote ``commits/V`` for barrier batch V, the files needed to restart the query
at V+1 are immutable: ``metadata`` (and barrierflow's :data:`STATE_FINGERPRINT`),
``offsets``/``commits`` of the epoch's batches (always including V-1 and V, which Spark
reads on restart), any ``sources/`` files, the state stores' metadata and schema files, and
for every state partition the files that load state version V+1
(:mod:`barrierflow.spark.state_files`; HDFSBackedStateStore: a ``<k>.snapshot`` plus
``<k+1..V+1>.delta``, or deltas from 1 when there is no snapshot; RocksDB: the newest
``<k>.zip`` <= V+1 with the ``SSTs/``/``logs/`` files its metadata names, plus changelogs
``<k+1..V+1>.changelog``, or only ``<V+1>.zip`` and its SSTs without changelog
checkpointing). :func:`take_local_snapshot` hard-links exactly those into a snapshot
directory. Cost: one ``link()`` per file, independent of state size.

RocksDB's SST files are immutable and shared by consecutive versions, so the uploader's
content addressing uploads only the SSTs (and the small zip or changelogs) a checkpoint
adds: the upload is proportional to the changed state. The base recorded for a RocksDB
partition (``state_bases``) is the zip version it loads from (0: none).

Incremental choice of the base (HDFS-backed provider): if the previous checkpoint's base
version ``k`` of a state partition still chains to V+1 through local deltas (and the chain is at most
:data:`MAX_DELTA_CHAIN` long), it is kept, so the already-uploaded snapshot is reused and
only new deltas are uploaded — unless Spark wrote a newer snapshot ``s`` that chains to V+1
and the deltas ``k+1..s`` it replaces are larger than it: then ``s`` becomes the base. A
restore (whose first batch replays the chain) thus reads at most about twice the state's
size, at the price of uploading a snapshot once the deltas outweigh it. Otherwise the
newest snapshot <= V+1 becomes the base.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.errors import CheckpointError
from barrierflow.spark import state_files

MAX_DELTA_CHAIN = 50
#: barrierflow's record of what a stage's state was built with, in the root of its Spark
#: checkpoint (:mod:`barrierflow.runtime.state_compat`); carried by every checkpoint like
#: ``metadata``, so a restore compares against the restored state's own record.
STATE_FINGERPRINT = "barrierflow-state.json"


@dataclass(frozen=True)
class SnapshotFile:
    """A file of a local snapshot: where it is in the Spark checkpoint (``relpath``,
    '/'-separated), its hard link (or copy) in the snapshot directory (``linked_path``, what the
    uploader reads) and its size in bytes."""

    relpath: str
    linked_path: str
    size: int


@dataclass
class LocalSnapshot:
    checkpoint_id: int
    batch_id: int
    state_version: int
    directory: str
    files: list[SnapshotFile]
    state_bases: dict[str, int] = field(default_factory=dict)
    duration_ms: float = 0.0


def _choose_base(deltas: set[int], snapshots: set[int], target: int, previous: int | None,
                 size: Callable[[str], int] | None = None) -> int:
    """The version whose snapshot (0 = empty state) starts the chain to ``target``.

    ``size(name)`` gives a file's size in bytes (``"<v>.delta"``, ``"<v>.snapshot"``); without
    it the previous base is kept whenever it still chains (see the module docstring)."""
    def chains(base: int) -> bool:
        return state_files.chains(base, target, deltas, snapshots)

    if previous is not None and previous <= target and target - previous <= MAX_DELTA_CHAIN and chains(previous):
        if size is not None:
            for newer in sorted((s for s in snapshots if previous < s <= target), reverse=True):
                replaced = sum(size(f"{v}.delta") for v in range(previous + 1, newer + 1))
                if chains(newer) and replaced > size(f"{newer}.snapshot"):
                    return newer
        return previous
    candidates = [*sorted((s for s in snapshots if s <= target), reverse=True), 0]
    for base in candidates:
        if chains(base):
            return base
    raise CheckpointError(
        f"state files to load version {target} are missing (deltas {sorted(deltas)[-5:]}, "
        f"snapshots {sorted(snapshots)[-5:]}); Spark may have cleaned them up: raise "
        "spark.sql.streaming.minBatchesToRetain"
    )


def _size(path: Path) -> int:
    """A file's size; 0 when Spark removed it meanwhile (linking it fails the checkpoint)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def select_files(
    checkpoint_dir: str | os.PathLike[str],
    batch_id: int,
    first_batch_id: int,
    previous_bases: dict[str, int] | None = None,
) -> tuple[list[str], dict[str, int]]:
    """The relative paths a restart at ``batch_id + 1`` needs, and the chosen state bases."""
    root = Path(checkpoint_dir)
    target = batch_id + 1
    previous_bases = previous_bases or {}
    rel: list[str] = []
    rel += [name for name in ("metadata", STATE_FINGERPRINT) if (root / name).is_file()]
    for log in ("offsets", "commits"):
        for b in range(min(first_batch_id, max(batch_id - 1, 0)), batch_id + 1):
            if (root / log / str(b)).is_file():
                rel.append(f"{log}/{b}")
    bases: dict[str, int] = {}
    for sub in ("sources", "state"):
        base_dir = root / sub
        if not base_dir.is_dir():
            continue
        for dirpath, dirs, _files in os.walk(base_dir):
            directory = Path(dirpath)
            deltas, snapshots, others = state_files.scan(directory)
            key = directory.relative_to(root).as_posix()
            rel += [f"{key}/{name}" for name in sorted(others)]
            if sub == "state" and state_files.is_rocksdb_partition(directory):
                dirs[:] = [d for d in dirs if d not in state_files.ROCKSDB_SHARED_DIRS]
                base = state_files.rocksdb_base(state_files.rocksdb_scan(directory), target)
                bases[key] = base
                rel += [f"{key}/{name}" for name in state_files.rocksdb_chain_files(directory, base, target)]
                continue
            if not deltas and not snapshots:
                continue
            base = _choose_base(deltas, snapshots, target, previous_bases.get(key),
                                size=lambda name, d=directory: _size(d / name))
            bases[key] = base
            rel += [f"{key}/{name}" for name in state_files.chain_files(base, target)]
    return rel, bases


def take_local_snapshot(
    checkpoint_dir: str | os.PathLike[str],
    snapshot_root: str | os.PathLike[str],
    checkpoint_id: int,
    batch_id: int,
    first_batch_id: int,
    previous_bases: dict[str, int] | None = None,
) -> LocalSnapshot:
    """Hard-link (copy where links are impossible) the files of batch ``batch_id`` into
    ``snapshot_root/chk-<id>``. Raises CheckpointError if a needed file is gone."""
    started = time.perf_counter()
    root = Path(checkpoint_dir)
    target = Path(snapshot_root) / f"chk-{checkpoint_id}"
    if target.exists():
        shutil.rmtree(target)
    rel, bases = select_files(root, batch_id, first_batch_id, previous_bases)
    linked: list[SnapshotFile] = []
    for relpath in rel:
        src = root / relpath
        dst = target / relpath
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            try:
                os.link(src, dst)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                shutil.copy2(src, dst)
            linked.append(SnapshotFile(relpath, str(dst), dst.stat().st_size))
        except FileNotFoundError as exc:
            raise CheckpointError(f"{relpath} disappeared before it was snapshotted: {exc}") from exc
    return LocalSnapshot(
        checkpoint_id=checkpoint_id,
        batch_id=batch_id,
        state_version=batch_id + 1,
        directory=str(target),
        files=linked,
        state_bases=bases,
        duration_ms=(time.perf_counter() - started) * 1000.0,
    )
