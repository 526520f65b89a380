"""Rebuilding a Spark checkpoint directory from a checkpoint manifest.

:func:`materialize_checkpoint` downloads every file the manifest lists from the store's
content-addressed ``shared/`` area into ``target`` under its original relative path,
checking size and sha256 on the way. The result is exactly the directory Spark needs to
resume at batch V+1 (``offsets``/``commits`` up to V, ``metadata``, and the state files that
load version V+1). It writes into a fresh temporary sibling and renames it into place at
the end, so a failed restore never leaves a half-written directory behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from barrierflow.atomic_files import write_atomic
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, shared_key
from barrierflow.checkpointing.uploader import sha256_file
from barrierflow.errors import CheckpointCorruptError, StorageError
from barrierflow.storage import ObjectNotFoundError


@dataclass(frozen=True)
class MaterializedCheckpoint:
    checkpoint_id: int
    directory: Path
    files: int
    bytes: int


def materialize_checkpoint(
    store: CheckpointStore, manifest: Manifest, target: str | os.PathLike[str]
) -> MaterializedCheckpoint:
    """Write checkpoint ``manifest`` as a Spark checkpoint directory at ``target``.

    ``target`` must not exist (the caller moves an old directory aside first).

    Raises:
        CheckpointCorruptError: a file is missing from the store or its size or sha256 does
            not match the manifest; the message names the checkpoint and the file.
        StorageError: the store could not be read.
    """
    target = Path(target)
    if target.exists():
        raise StorageError(f"{target} already exists; move it aside before restoring into it")
    total = 0

    def fill(tmp: Path) -> None:
        nonlocal total
        tmp.mkdir(parents=True)
        for entry in manifest.files:
            if entry.path.startswith("/") or ".." in entry.path.split("/"):
                raise CheckpointCorruptError(
                    f"checkpoint {manifest.checkpoint_id}: manifest lists an unsafe path {entry.path!r}")
            dest = tmp / entry.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            key = shared_key(entry.sha256)
            try:
                store.objects.download_file(key, str(dest))
            except ObjectNotFoundError:
                raise CheckpointCorruptError(
                    f"checkpoint {manifest.checkpoint_id}: file {entry.path} is missing from the store "
                    f"({store.objects.describe(key)}); restore an older checkpoint or run "
                    "'barrierflow verify' to find an intact one"
                ) from None
            size = dest.stat().st_size
            if size != entry.size or sha256_file(str(dest)) != entry.sha256:
                raise CheckpointCorruptError(
                    f"checkpoint {manifest.checkpoint_id}: file {entry.path} is altered in the store "
                    f"({store.objects.describe(key)}: {size} bytes, sha256 mismatch; the manifest says "
                    f"{entry.size} bytes); restore an older checkpoint"
                )
            total += size

    write_atomic(target, fill)
    return MaterializedCheckpoint(manifest.checkpoint_id, target, len(manifest.files), total)
