"""The files of Spark's state store providers, and which of them load a state version.

This is the only module that knows the layout of ``state/<operator>/<partition>/``. Batch
``V`` commits state version ``V + 1``. Two providers are supported (``spark.state_store``):

HDFSBackedStateStoreProvider (``hdfs``)
    ``<v>.delta`` (the changes of batch v-1) and, from time to time, ``<v>.snapshot`` (the
    whole state at version v). Loading version ``t`` needs a *base* ``b`` (``b.snapshot``,
    or the empty state when ``b == 0``) and every delta ``b+1..t``: a *chain*.

RocksDBStateStoreProvider (``rocksdb``; checkpoint format version 1)
    ``<v>.zip`` is a complete RocksDB checkpoint of version v *except* its immutable data
    files: the zip's ``metadata`` entry (``v1`` line, then JSON) lists them with their names
    in the partition directory, ``SSTs/<n>-<uuid>.sst`` (``sstFiles``) and
    ``logs/<n>-<uuid>.log`` (``logFiles``). These are shared by many versions and never
    rewritten, so a checkpoint uploads only the new ones. With changelog checkpointing
    (``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled``) a batch writes
    ``<v>.changelog`` (its changes) and Spark's maintenance thread writes a ``<v>.zip`` now
    and then (every ``minDeltasForSnapshot`` versions, SST files first, the zip last and
    atomically). Loading version ``t`` (RocksDBFileManager / RocksDB.load): the newest zip
    ``b <= t`` (``b = 0``: an empty database), its immutable files, then changelogs
    ``b+1..t`` replayed in order; without changelog checkpointing every version has its zip,
    so ``b = t``.

Other files of such a directory (``_metadata/schema``, the operator's ``_metadata``) are
not versioned; hidden files (Spark's ``.crc`` sidecars, temporary files) are never needed.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from barrierflow.errors import CheckpointError

VERSIONED = re.compile(r"^(\d+)\.(delta|snapshot)$")
ROCKSDB_VERSIONED = re.compile(r"^(\d+)\.(zip|changelog)$")
#: Sub-directories of a RocksDB state partition that hold immutable files named by a zip.
ROCKSDB_SHARED_DIRS = ("SSTs", "logs")


def versioned(name: str) -> tuple[int, str] | None:
    """``(version, "delta" | "snapshot")`` for an HDFS-backed state file name, else None."""
    match = VERSIONED.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def rocksdb_versioned(name: str) -> tuple[int, str] | None:
    """``(version, "zip" | "changelog")`` for a RocksDB state file name, else None."""
    match = ROCKSDB_VERSIONED.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def scan(directory: Path) -> tuple[set[int], set[int], list[str]]:
    """Delta versions, snapshot versions and other (unversioned) file names in one state
    directory; hidden files (Spark's ``.crc`` and temp files) are skipped."""
    deltas: set[int] = set()
    snapshots: set[int] = set()
    others: list[str] = []
    for name in os.listdir(directory):
        if name.startswith("."):
            continue
        found = versioned(name)
        if found is not None:
            (deltas if found[1] == "delta" else snapshots).add(found[0])
        elif (directory / name).is_file() and rocksdb_versioned(name) is None:
            others.append(name)
    return deltas, snapshots, others


def chains(base: int, target: int, deltas: set[int], snapshots: set[int]) -> bool:
    """Whether version ``target`` loads from ``base`` with the files present."""
    return (base == 0 or base in snapshots) and all(v in deltas for v in range(base + 1, target + 1))


def chain_files(base: int, target: int) -> list[str]:
    """The file names that load version ``target`` from ``base``, base first."""
    return ([f"{base}.snapshot"] if base else []) + [f"{v}.delta" for v in range(base + 1, target + 1)]


# -- RocksDB ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RocksDBFiles:
    """The RocksDB files of one state partition directory (names relative to it)."""

    zips: set[int]
    changelogs: set[int]


def rocksdb_scan(directory: Path) -> RocksDBFiles:
    """The zip and changelog versions in one state partition directory (hidden files skipped)."""
    zips: set[int] = set()
    changelogs: set[int] = set()
    for name in os.listdir(directory):
        found = rocksdb_versioned(name)
        if found is not None:
            (zips if found[1] == "zip" else changelogs).add(found[0])
    return RocksDBFiles(zips, changelogs)


def is_rocksdb_partition(directory: Path) -> bool:
    """Whether ``directory`` holds RocksDB state files (a zip, a changelog or ``SSTs/``)."""
    found = rocksdb_scan(directory)
    return bool(found.zips or found.changelogs) or (directory / "SSTs").is_dir()


def rocksdb_base(files: RocksDBFiles, target: int) -> int:
    """The zip version (0: the empty database) Spark loads version ``target`` from: the newest
    zip ``<= target`` (RocksDBFileManager.getLatestSnapshotVersion), which must chain to
    ``target`` through changelogs. Raises CheckpointError when the files to load it are missing."""
    base = max((z for z in files.zips if z <= target), default=0)
    missing = [v for v in range(base + 1, target + 1) if v not in files.changelogs]
    if missing:
        raise CheckpointError(
            f"RocksDB state files to load version {target} are missing (newest zip <= {target}: "
            f"{base or 'none'}; changelogs {missing[:5]} missing); Spark may have cleaned them up: raise "
            "spark.sql.streaming.minBatchesToRetain")
    return base


def rocksdb_immutable_files(zip_file: Path | bytes, name: str = "") -> list[str]:
    """The immutable files (``SSTs/…``, ``logs/…``) the zip's ``metadata`` names, relative to
    the partition directory; ``zip_file`` is the zip's path or its bytes (``name`` names it
    in errors). Raises CheckpointError for a zip that is not Spark's format v1."""
    import io

    name = name or str(zip_file if isinstance(zip_file, Path) else "zip")
    try:
        with zipfile.ZipFile(io.BytesIO(zip_file) if isinstance(zip_file, bytes) else zip_file) as archive:
            text = archive.read("metadata").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{name} is not a readable RocksDB checkpoint zip: {exc}") from exc
    version, _, body = text.partition("\n")
    if version.strip() != "v1":
        raise CheckpointError(f"{name}: RocksDB checkpoint metadata {version.strip()!r} is not supported "
                              "(expected v1; keep spark.sql.streaming.stateStore.checkpointFormatVersion at 1)")
    try:
        metadata = json.loads(body)
        names = [f"SSTs/{f['dfsSstFileName']}" for f in metadata.get("sstFiles") or []]
        names += [f"logs/{f['dfsLogFileName']}" for f in metadata.get("logFiles") or []]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{name}: unreadable RocksDB checkpoint metadata: {exc}") from exc
    return names


def is_rocksdb_listing(names: set[str]) -> bool:
    """Whether a state partition's file names (relative to it) are RocksDB's."""
    return any(rocksdb_versioned(n) is not None or n.startswith("SSTs/") for n in names)


def rocksdb_chain_files(directory: Path, base: int, target: int) -> list[str]:
    """The file names (relative to ``directory``) that load version ``target`` from zip
    ``base``: the zip, its immutable files, then changelogs ``base+1..target``."""
    names = [f"{base}.zip", *rocksdb_immutable_files(directory / f"{base}.zip")] if base else []
    return names + [f"{v}.changelog" for v in range(base + 1, target + 1)]
