"""Failure-injection doubles around a real :class:`ObjectStore` (local or S3).

They delegate every call to the wrapped store and add one behaviour each:

* :class:`SlowObjectStore` — sleeps before each write whose key matches, to widen the
  asynchronous phase; records when each write finished (``writes``), and, when a manifest
  is written, whether every shared file it references was already stored
  (``manifest_violations`` stays empty when the completion protocol holds). Given a
  ``progress`` counter (e.g. Spark's committed micro-batches), the first matching write of
  each checkpoint also waits until the counter moves: an upload that blocked processing
  could then never finish, and fails with :class:`StorageError` after ``progress_timeout``
  instead of passing or failing by timing.
* :class:`FailingObjectStore` — raises :class:`StorageError` on writes whose key matches,
  for as long as ``failing`` is true.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from barrierflow.errors import StorageError
from barrierflow.storage.object_store import ObjectInfo, ObjectStore

KeyFilter = Callable[[str], bool]


def shared_files(key: str) -> bool:
    return key.startswith("shared/")


class _Delegating(ObjectStore):
    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri

    def _before_write(self, key: str) -> None:
        return None

    def _after_write(self, key: str, data: bytes | None) -> None:
        return None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._before_write(key)
        self.inner.put_bytes(key, data)
        self._after_write(key, data)

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        self._before_write(key)
        self.inner.put_file(key, local_path, sha256)
        self._after_write(key, None)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._before_write(key)
        created = self.inner.put_if_absent(key, data)
        if created:
            self._after_write(key, data)
        return created

    def check_conditional_writes(self, probe_key: str) -> None:
        self.inner.check_conditional_writes(probe_key)

    def get_bytes(self, key: str) -> bytes:
        return self.inner.get_bytes(key)

    def download_file(self, key: str, local_path: str) -> None:
        self.inner.download_file(key, local_path)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def copy(self, src: str, dst: str) -> None:
        self.inner.copy(src, dst)


@dataclass(frozen=True)
class WriteRecord:
    key: str
    finished: float  # time.monotonic()


@dataclass
class SlowObjectStore(_Delegating):
    inner: ObjectStore
    delay: float = 0.2
    matches: KeyFilter = shared_files
    writes: list[WriteRecord] = field(default_factory=list)
    manifest_violations: list[str] = field(default_factory=list)
    progress: Callable[[], int] | None = None
    progress_timeout: float = 120.0

    def __post_init__(self) -> None:
        self.uri = self.inner.uri
        self._lock = threading.Lock()
        self._gated = False  # this checkpoint's first matching write already waited

    def _before_write(self, key: str) -> None:
        if not self.matches(key):
            return
        time.sleep(self.delay)
        with self._lock:
            gate, self._gated = self.progress is not None and not self._gated, True
        if gate:
            assert self.progress is not None
            self._wait_for_progress(key, self.progress)

    def _wait_for_progress(self, key: str, progress: Callable[[], int]) -> None:
        start = progress()
        deadline = time.monotonic() + self.progress_timeout
        while progress() <= start:
            if time.monotonic() > deadline:
                raise StorageError(
                    f"no progress in {self.progress_timeout:.0f} s while uploading {self.describe(key)}: "
                    "the upload blocks processing")
            time.sleep(0.05)

    def _after_write(self, key: str, data: bytes | None) -> None:
        if key.endswith("/_metadata.json") and data is not None:
            manifest = json.loads(data)
            for entry in manifest["files"]:
                shared = f"shared/{entry['sha256'][:2]}/{entry['sha256']}"
                if self.inner.size(shared) != entry["size"]:
                    self.manifest_violations.append(f"{key}: {entry['path']} not stored before the manifest")
        with self._lock:
            self.writes.append(WriteRecord(key, time.monotonic()))
            if key.endswith("/_metadata.json"):
                self._gated = False  # the next checkpoint's upload waits again


@dataclass
class FailingObjectStore(_Delegating):
    inner: ObjectStore
    matches: KeyFilter = shared_files
    failing: bool = True
    failures: int = 0

    def __post_init__(self) -> None:
        self.uri = self.inner.uri

    def _before_write(self, key: str) -> None:
        if self.failing and self.matches(key):
            self.failures += 1
            raise StorageError(f"injected failure writing {self.describe(key)}")
