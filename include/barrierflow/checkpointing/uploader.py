"""The asynchronous phase: hash staged files and store the new ones, off the processing path.

:class:`SnapshotUploader` runs each checkpoint's upload on a background thread (at most
``max_concurrent`` checkpoints at once, each uploading up to ``file_threads`` files in
parallel) and returns, per checkpoint, the manifest's file list and byte counts. It never
writes a manifest: completing a checkpoint is the coordinator's decision.

Incremental: a file whose sha256 is already in the store's ``shared/`` area (listed once
at start, then tracked) is referenced, not uploaded. Hashes are cached per
(device, inode, size, mtime) because hard-linked staged files share the inode of Spark's
immutable state files, so an unchanged file is hashed once for the job's lifetime.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from barrierflow.checkpointing.manifest import ManifestFile
from barrierflow.checkpointing.snapshot import LocalSnapshot
from barrierflow.checkpointing.store import CheckpointStore

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
    def __init__(self, store: CheckpointStore, max_concurrent: int = 1, file_threads: int = 4) -> None:
        self.store = store
        self._checkpoints = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="chk-upload")
        self._files = ThreadPoolExecutor(max_workers=file_threads, thread_name_prefix="chk-file")
        self._lock = threading.Lock()
        self._known: set[str] | None = None
        self._hash_cache: dict[tuple[int, int, int, int], str] = {}
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def forget(self, digests: set[str]) -> None:
        """Tell the uploader these shared files were deleted (retention)."""
        with self._lock:
            if self._known is not None:
                self._known -= digests

    def submit(self, snapshot: LocalSnapshot) -> Future[UploadResult]:
        with self._lock:
            self._in_flight += 1
        future = self._checkpoints.submit(self._upload, snapshot)
        future.add_done_callback(lambda _f: self._done())
        return future

    def upload_now(self, snapshot: LocalSnapshot) -> UploadResult:
        """Upload in the caller's thread (the synchronous-snapshot baseline)."""
        return self._upload(snapshot)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _digest(self, path: str) -> str:
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._hash_cache.get(key)
        if cached is None:
            cached = sha256_file(path)
            self._hash_cache[key] = cached
        return cached

    def _upload(self, snapshot: LocalSnapshot) -> UploadResult:
        started = time.perf_counter()
        with self._lock:
            if self._known is None:
                self._known = self.store.shared_digests()
        entries: list[tuple[str, str, int, str]] = []
        for staged in snapshot.files:
            entries.append((staged.relpath, self._digest(staged.staged_path), staged.size, staged.staged_path))
        with self._lock:
            known = set(self._known or ())
        todo: dict[str, str] = {}
        for _rel, digest, _size, path in entries:
            if digest not in known and digest not in todo:
                todo[digest] = path
        futures = [self._files.submit(self.store.put_shared, digest, path) for digest, path in todo.items()]
        for future in futures:
            future.result()  # re-raises the first StorageError
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
        self._checkpoints.shutdown(wait=wait, cancel_futures=not wait)
        self._files.shutdown(wait=wait, cancel_futures=not wait)
