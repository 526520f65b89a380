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

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import CheckpointError
from barrierflow.spark import state_files
from barrierflow.storage.object_dir import ObjectDir
from barrierflow.storage.object_store import ObjectNotFoundError

MAX_DELTA_CHAIN = 50
#: barrierflow's record of what a stage's state was built with, in the root of its Spark
#: checkpoint (:mod:`barrierflow.runtime.state_compat`); carried by every checkpoint like
#: ``metadata``, so a restore compares against the restored state's own record.
STATE_FINGERPRINT = "barrierflow-state.json"


def record_stateful_operators(checkpoint_dir: str | os.PathLike[str], fingerprint: list[dict[str, Any]]) -> None:
    """Record ``fingerprint`` as the stateful operators of the local Spark checkpoint at
    ``checkpoint_dir`` (its :data:`STATE_FINGERPRINT`, other fields kept): what an offline
    rewrite of its state into another definition's leaves."""
    path = Path(checkpoint_dir) / STATE_FINGERPRINT
    document = json.loads(path.read_text()) if path.is_file() else {"version": 1}
    document["stateful_operators"] = fingerprint
    path.write_text(json.dumps(document, indent=1, sort_keys=True))


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


def _snapshot(checkpoint_id: int, batch_id: int, target: Path, files: list[SnapshotFile], bases: dict[str, int],
              started: float) -> LocalSnapshot:
    """The snapshot of batch ``batch_id`` (state version ``batch_id + 1``) taken into ``target``
    since ``started`` (a ``time.perf_counter()`` reading)."""
    return LocalSnapshot(checkpoint_id=checkpoint_id, batch_id=batch_id, state_version=batch_id + 1,
                         directory=str(target), files=files, state_bases=bases,
                         duration_ms=(time.perf_counter() - started) * 1000.0)


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
    return _snapshot(checkpoint_id, batch_id, target, linked, bases, started)


# -- Spark's checkpoint on object storage --------------------------------------------------


def select_listed_files(
    listing: dict[str, int],
    read: Callable[[str], bytes],
    batch_id: int,
    first_batch_id: int,
    previous_bases: dict[str, int] | None = None,
) -> tuple[list[str], dict[str, int]]:
    """:func:`select_files` over a listing instead of a local directory: ``listing`` maps every
    file of the Spark checkpoint (relative path, '/'-separated) to its size, ``read(relpath)``
    returns a file's bytes (only a RocksDB zip is read, for the immutable files it names). The
    same files, in the same order, as :func:`select_files` picks from the same tree."""
    target = batch_id + 1
    previous_bases = previous_bases or {}
    children: dict[str, set[str]] = {}
    subdirs: dict[str, set[str]] = {}
    for relpath in listing:
        parts = relpath.split("/")
        for depth in range(1, len(parts)):
            subdirs.setdefault("/".join(parts[:depth - 1]), set()).add(parts[depth - 1])
        children.setdefault("/".join(parts[:-1]), set()).add(parts[-1])
    rel: list[str] = [name for name in ("metadata", STATE_FINGERPRINT) if name in listing]
    for log in ("offsets", "commits"):
        for b in range(min(first_batch_id, max(batch_id - 1, 0)), batch_id + 1):
            if f"{log}/{b}" in listing:
                rel.append(f"{log}/{b}")
    bases: dict[str, int] = {}
    for sub in ("sources", "state"):
        if sub not in subdirs.get("", set()):
            continue
        pending = [sub]
        while pending:
            key = pending.pop(0)
            names = {n for n in children.get(key, set()) if not n.startswith(".")}
            found = [(n, state_files.versioned(n)) for n in names]
            deltas = {v[0] for _n, v in found if v is not None and v[1] == "delta"}
            snapshots = {v[0] for _n, v in found if v is not None and v[1] == "snapshot"}
            others = sorted(n for n, v in found if v is None and state_files.rocksdb_versioned(n) is None)
            rel += [f"{key}/{name}" for name in others]
            dirs = sorted(subdirs.get(key, set()))
            rocks = [state_files.rocksdb_versioned(n) for n in names]
            zips = {v[0] for v in rocks if v is not None and v[1] == "zip"}
            changelogs = {v[0] for v in rocks if v is not None and v[1] == "changelog"}
            if sub == "state" and (zips or changelogs or "SSTs" in dirs):
                base = state_files.rocksdb_base(state_files.RocksDBFiles(zips, changelogs), target)
                bases[key] = base
                if base:
                    rel += [f"{key}/{base}.zip"] + [
                        f"{key}/{name}" for name in
                        state_files.rocksdb_immutable_files(read(f"{key}/{base}.zip"), f"{key}/{base}.zip")]
                rel += [f"{key}/{v}.changelog" for v in range(base + 1, target + 1)]
                dirs = [d for d in dirs if d not in state_files.ROCKSDB_SHARED_DIRS]
            elif deltas or snapshots:
                base = _choose_base(deltas, snapshots, target, previous_bases.get(key),
                                    size=lambda name, k=key: listing.get(f"{k}/{name}", 0))
                bases[key] = base
                rel += [f"{key}/{name}" for name in state_files.chain_files(base, target)]
            pending[:0] = [f"{key}/{d}" for d in dirs]
    return rel, bases


#: The driver's copies of the newest snapshot's object-storage files, below the snapshot root.
OBJECT_CACHE = ".objects"


def take_object_snapshot(
    checkpoint: ObjectDir,
    snapshot_root: str | os.PathLike[str],
    checkpoint_id: int,
    batch_id: int,
    first_batch_id: int,
    previous_bases: dict[str, int] | None = None,
) -> LocalSnapshot:
    """:func:`take_local_snapshot` for a Spark checkpoint on object storage: state files there
    cannot be hard-linked, so the synchronous phase copies what batch ``batch_id`` needs to the
    driver's ``snapshot_root/chk-<id>`` (one LIST, then a GET per file not copied before).

    Files the previous snapshot copied and that are unchanged on the store (same size and entity
    tag; Spark's state and log files are immutable once written) are hard-linked from the
    driver's cache (``snapshot_root/.objects``, which holds the newest snapshot's files) instead
    of read again: a checkpoint reads only the state files Spark wrote since the previous one,
    as it uploads only those. Once copied, a file no longer depends on Spark's maintenance,
    which may delete it; a file it deleted before the copy fails the checkpoint (CheckpointError,
    as a vanished local file does). The uploader, the manifest and the local retention then see
    an ordinary local snapshot.
    """
    started = time.perf_counter()
    target = Path(snapshot_root) / f"chk-{checkpoint_id}"
    cache = Path(snapshot_root) / OBJECT_CACHE
    if target.exists():
        shutil.rmtree(target)
    infos = checkpoint.listing()
    sizes = {key: info.size for key, info in infos.items()}
    rel, bases = select_listed_files(sizes, lambda key: (checkpoint / key).read_bytes(), batch_id, first_batch_id,
                                     previous_bases)
    linked: list[SnapshotFile] = []
    kept: set[Path] = set()
    for relpath in rel:
        info = infos[relpath]
        cached = cache / f"{relpath}@{info.etag or 'noetag'}-{info.size}"
        dst = target / relpath
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not cached.is_file():
            cached.parent.mkdir(parents=True, exist_ok=True)

            def download(part: Path, relpath: str = relpath, size: int = info.size) -> None:
                try:
                    checkpoint.store.download_file(relpath, str(part))
                except ObjectNotFoundError as exc:
                    raise CheckpointError(f"{relpath} disappeared before it was snapshotted: {exc}") from exc
                if part.stat().st_size != size:
                    raise CheckpointError(f"{checkpoint / relpath} changed while it was snapshotted "
                                          f"(listed {size} bytes, read another size)")

            write_atomic(cached, download)
        kept.add(cached)
        os.link(cached, dst)
        linked.append(SnapshotFile(relpath, str(dst), info.size))
    for path in [p for p in cache.rglob("*") if p.is_file()] if cache.is_dir() else []:
        if path not in kept:
            path.unlink(missing_ok=True)
    return _snapshot(checkpoint_id, batch_id, target, linked, bases, started)
