"""The asynchronous phase's upload: hash the snapshot's files and store the new ones.

:meth:`SnapshotUploader.upload` runs in the coordinator's async-phase thread and uploads up
to ``file_threads`` files in parallel; it returns the manifest's file list and byte counts.
It never writes a manifest: completing a checkpoint is the coordinator's decision.

Incremental: a file whose sha256 is already in the store's ``shared/`` area (listed once
at start, then tracked) is referenced, not uploaded. Hashes are cached per
(device, inode, size, mtime) because hard-linked snapshot files share the inode of Spark's
immutable state files, so an unchanged file is hashed once for the job's lifetime.

Reservations (barrierflow.checkpointing.reservations): before uploading, the upload reserves
every digest the checkpoint references (``_inflight/chk-<n>.json``), then waits out a running
retention run (and re-lists ``shared/`` after one finished), so a shared file
the checkpoint relies on is never deleted under it. The coordinator releases the
reservation when the checkpoint completes or fails.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass

from barrierflow.checkpointing.manifest import ManifestFile
from barrierflow.checkpointing.reservations import RetentionRunWatch, reserve
from barrierflow.checkpointing.snapshot import LocalSnapshot
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.checkpointing.thread_priority import background_executor
from barrierflow.faults import crash_point

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UploadResult:
    files: list[ManifestFile]
    full_bytes: int
    incremental_bytes: int
    duration_ms: float


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class SnapshotUploader:
    def __init__(self, store: CheckpointStore, file_threads: int = 4, nice: int = 0) -> None:
        """``nice``: CPU priority of the upload threads below the caller's
        (:mod:`barrierflow.checkpointing.thread_priority`)."""
        self.store = store
        self._files = background_executor(file_threads, "chk-file", nice)
        self._lock = threading.Lock()
        self._known: set[str] | None = None
        self._hash_cache: dict[tuple[int, int, int, int], str] = {}
        self._retention = RetentionRunWatch(store.objects)

    def forget(self, digests: set[str]) -> None:
        """Tell the uploader these shared files were deleted (retention)."""
        with self._lock:
            if self._known is not None:
                self._known -= digests

    def upload(self, snapshot: LocalSnapshot) -> UploadResult:
        """Store the snapshot's new files; raises the first storage error."""
        return self._upload(snapshot)

    def _digest(self, path: str, seen: dict[tuple[int, int, int, int], str]) -> str:
        """The file's sha256, from the cache when the same file (device, inode, size, mtime)
        was hashed for the previous snapshot; recorded in ``seen``."""
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._hash_cache.get(key)
        if cached is None:
            cached = sha256_file(path)
        seen[key] = cached
        return cached

    def _upload(self, snapshot: LocalSnapshot) -> UploadResult:
        started = time.perf_counter()
        entries: list[tuple[str, str, int, str]] = []
        seen: dict[tuple[int, int, int, int], str] = {}
        for file in snapshot.files:
            entries.append((file.relpath, self._digest(file.linked_path, seen), file.size, file.linked_path))
        # Only this snapshot's files can be in the next one (a file that left a checkpoint's
        # file list never comes back), so the cache holds just them: it grew by every new file
        # before (about 8 KB per checkpoint, measured by the soak).
        self._hash_cache = seen
        reserve(self.store.objects, self.store.pipeline, snapshot.checkpoint_id, (e[1] for e in entries))
        relist = self._retention.wait_out_retention()
        with self._lock:
            if self._known is None or relist:
                self._known = self.store.shared_digests()
        with self._lock:
            known = set(self._known or ())
        todo: dict[str, str] = {}
        for _rel, digest, _size, path in entries:
            if digest not in known and digest not in todo:
                todo[digest] = path
        futures = [self._files.submit(self.store.put_shared, digest, path) for digest, path in todo.items()]
        for index, future in enumerate(futures):
            future.result()  # re-raises the first StorageError
            if index == 0:
                crash_point("during_upload", checkpoint_id=snapshot.checkpoint_id)
        with self._lock:
            assert self._known is not None
            self._known |= set(todo)
        files = [ManifestFile(path=rel, sha256=d, size=size, uploaded=d in todo) for rel, d, size, _p in entries]
        incremental = sum(os.path.getsize(p) for p in todo.values())
        return UploadResult(
            files=files,
            full_bytes=sum(f.size for f in files),
            incremental_bytes=incremental,
            duration_ms=(time.perf_counter() - started) * 1000.0,
        )

    def shutdown(self, wait: bool = True) -> None:
        self._files.shutdown(wait=wait, cancel_futures=not wait)
