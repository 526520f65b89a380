"""The uploader's hash cache holds only the last snapshot's files (the 1,000-checkpoint soak
found it growing by every new file, about 8 KB of driver memory per checkpoint)."""

from __future__ import annotations

from pathlib import Path

from barrierflow.checkpointing.snapshot import LocalSnapshot, SnapshotFile
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.checkpointing.uploader import SnapshotUploader
from barrierflow.storage.local import LocalObjectStore


def test_hash_cache_keeps_only_the_last_snapshots_files_and_reuses_them(tmp_path: Path) -> None:
    store = CheckpointStore(LocalObjectStore(tmp_path / "store"), "p")
    uploader = SnapshotUploader(store)
    staged = tmp_path / "staged"
    staged.mkdir()
    base = staged / "base.snapshot"
    base.write_bytes(b"state")  # in every snapshot: hashed once
    for n in range(1, 31):
        delta = staged / f"{n}.delta"
        delta.write_bytes(f"delta {n}".encode())
        files = [SnapshotFile("state/0/0/base.snapshot", str(base), base.stat().st_size),
                 SnapshotFile(f"state/0/0/{n}.delta", str(delta), delta.stat().st_size)]
        if n > 1:  # the previous delta is still referenced
            previous = staged / f"{n - 1}.delta"
            files.append(SnapshotFile(f"state/0/0/{n - 1}.delta", str(previous), previous.stat().st_size))
        uploader.upload(LocalSnapshot(n, n, n, str(staged), files))
        assert len(uploader._hash_cache) == len(files)
    uploader.shutdown()
