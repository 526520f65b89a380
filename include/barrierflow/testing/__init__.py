"""Test doubles for the tests of a barrierflow user's own pipelines and sinks.

This is the one test module the library ships: what a user's tests need to exercise
barrierflow's failure handling and a sink without Spark. barrierflow's own throwaway servers
(S3, PostgreSQL, Kafka, Airflow, a Spark standalone cluster), its browser driver and its
benchmarks are not shipped: they live in the repository's ``tests/support/`` and ``bench/``.
Production code never imports this module (import-linter contract ``no-testing-in-production``).

Failure-injection doubles around a real :class:`ObjectStore` (local or S3). They delegate every
call to the wrapped store and add one behaviour each:

* :class:`SlowObjectStore` — sleeps before each write whose key matches, to widen the
  asynchronous phase; records when each write finished (``writes``), and, when a manifest
  is written, whether every shared file it references was already stored
  (``manifest_violations`` stays empty when the completion protocol holds). Given a
  ``progress`` counter (e.g. Spark's committed micro-batches), the first matching write of
  each checkpoint also waits until the counter moved ``progress_steps`` times: an upload
  that blocked processing could then never finish, and fails with :class:`StorageError`
  after ``progress_timeout`` instead of passing or failing by timing. Each wait is recorded
  (``progress_waits``). Two steps prove that work *after* the checkpoint's own batch went
  on: the first may be that batch's own commit.
* :class:`FailingObjectStore` — raises :class:`StorageError` on writes whose key matches,
  for as long as ``failing`` is true.

A sink double:

* :class:`FailingCommitter` — wraps a sink's :class:`SinkCommitter`; from its ``fail_from``-th
  commit on (``notify_checkpoint_complete``, counted from 1) it raises :class:`SinkError`
  without telling the wrapped sink, so the epoch stays pre-committed, as when the sink's
  system stays unreachable past its commit retries. Pre-commits and aborts pass through.

A pipeline runner and the servers its tests need:

* :func:`run_bounded` — runs a spec of one stage or several (generator or Kafka sources; Parquet,
  PostgreSQL or Kafka sinks) in a local Spark on a bounded input with every path in a folder of
  the test's, until everything is committed, and returns its input and the committed output
  (:class:`BoundedRun`; :mod:`barrierflow.testing.bounded`).
* :func:`embedded_kafka` — Apache Kafka on 127.0.0.1 for the ``with`` block (the embedded broker
  barrierflow ships, :mod:`barrierflow.kafka_io.embedded_broker`); yields ``host:port``.
* :func:`expectation_failures` — what a Great Expectations suite file (the format deep
  verification reads) finds wrong in a few rows built in the test.
* :func:`throwaway_postgres` — a fresh PostgreSQL server on 127.0.0.1 for the ``with`` block,
  from the installed server binaries; yields its connection string
  (:mod:`barrierflow.testing.postgres`).

The write-ahead batch writer:

* :func:`write_ahead_batch` — writes a micro-batch ahead without Spark, in the exact layout the
  Spark-side write-ahead writer produces (:mod:`barrierflow.sinks.write_ahead`), to drive a
  two-phase-commit sink in a test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from barrierflow.errors import SinkError, StorageError
from barrierflow.storage import open_store
from barrierflow.storage.object_store import ObjectInfo, ObjectStore
from barrierflow.testing.bounded import BoundedRun, run_bounded
from barrierflow.testing.postgres import throwaway_postgres
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.transactions.write_ahead import MARKER, batch_prefix

__all__ = ["BoundedRun", "FailingCommitter", "FailingObjectStore", "KeyFilter", "ProgressWait", "SlowObjectStore",
           "WriteRecord", "embedded_kafka", "expectation_failures", "run_bounded", "shared_files",
           "throwaway_postgres", "write_ahead_batch"]

#: Which keys a double acts on.
KeyFilter = Callable[[str], bool]


def shared_files(key: str) -> bool:
    """The default :data:`KeyFilter`: the checkpoint store's shared (content-addressed) files."""
    return key.startswith("shared/")


class _Delegating(ObjectStore):
    """Passes every call to ``inner``; subclasses hook in before and after each write."""

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
    """One write a :class:`SlowObjectStore` finished."""

    key: str
    finished: float  # time.monotonic()


@dataclass
class SlowObjectStore(_Delegating):
    """Slow writes of matching keys, recorded; see the module docstring."""

    inner: ObjectStore
    delay: float = 0.2
    matches: KeyFilter = shared_files
    writes: list[WriteRecord] = field(default_factory=list)
    progress_waits: list[ProgressWait] = field(default_factory=list)
    manifest_violations: list[str] = field(default_factory=list)
    progress: Callable[[], int] | None = None
    progress_steps: int = 1
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
        while (reached := progress()) < start + self.progress_steps:
            if time.monotonic() > deadline:
                raise StorageError(
                    f"no progress in {self.progress_timeout:g} s while uploading {self.describe(key)}: "
                    "the upload blocks processing")
            time.sleep(0.05)
        with self._lock:
            self.progress_waits.append(ProgressWait(key, start, reached))

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


@dataclass(frozen=True)
class ProgressWait:
    """One upload a :class:`SlowObjectStore` held until the ``progress`` counter moved from
    ``start`` to ``reached`` (at least ``start + progress_steps``)."""

    key: str
    start: int
    reached: int


@dataclass
class FailingObjectStore(_Delegating):
    """Writes of matching keys fail while ``failing`` is true; see the module docstring."""

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


class FailingCommitter(SinkCommitter):
    """A sink whose commits fail from the ``fail_from``-th on; see the module docstring.

    Attributes:
        inner: the wrapped sink (its ``name`` is this double's).
        fail_from: the first commit call (counted from 1) that fails.
        committed: checkpoint ids whose commit was passed on to ``inner``, in call order.
        failed: checkpoint ids whose commit failed, in call order.
    """

    def __init__(self, inner: SinkCommitter, *, fail_from: int = 1) -> None:
        self.inner = inner
        self.name = inner.name
        self.fail_from = fail_from
        self.committed: list[int] = []
        self.failed: list[int] = []

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        return self.inner.pre_commit_epoch(checkpoint_id, barrier_batch)

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        if len(self.committed) + len(self.failed) + 1 >= self.fail_from:
            self.failed.append(checkpoint_id)
            raise SinkError(f"sink {self.name!r}: injected failure committing checkpoint {checkpoint_id}")
        self.inner.notify_checkpoint_complete(checkpoint_id, barrier_batch)
        self.committed.append(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.inner.notify_checkpoint_aborted(checkpoint_id)


def write_ahead_batch(uri: str, batch_id: int, table: Any, files: int = 1) -> None:
    """Write ``table`` (pyarrow) ahead as micro-batch ``batch_id`` in ``files`` task files of the
    store at ``uri`` (a sink's write-ahead area), then its file list, as the Spark-side write-ahead
    writer does."""
    import pyarrow.parquet as pq

    store = open_store(uri)
    listing = []
    step = max(1, -(-table.num_rows // files)) if table.num_rows else 1
    for task, lo in enumerate(range(0, max(table.num_rows, 1), step)):
        part = table.slice(lo, step)
        if part.num_rows == 0:
            continue
        buffer = io.BytesIO()
        pq.write_table(part, buffer)
        key = f"{batch_prefix(batch_id)}{task:05d}-test.parquet"
        store.put_bytes(key, buffer.getvalue())
        listing.append({"key": key, "rows": part.num_rows})
    store.put_bytes(batch_prefix(batch_id) + MARKER,
                    json.dumps({"batch_id": batch_id, "files": listing, "rows": table.num_rows}).encode())


@contextlib.contextmanager
def embedded_kafka(*, startup_timeout: float = 60.0) -> Iterator[str]:
    """Apache Kafka (single node, KRaft) on 127.0.0.1 on free ports for the ``with`` block, its
    data in a temporary directory: yields ``host:port`` once it answers, stops it and deletes the
    data on exit. The broker is barrierflow's embedded one (its jars come with barrierflow's
    installation, ``make install``); it auto-creates no topics, so a test creates the ones it
    produces to (a Kafka sink's: :func:`run_bounded` creates them).

    Raises:
        EmbeddedBrokerError: Kafka's jars are not installed, or the broker did not start.
    """
    from barrierflow.kafka_io.embedded_broker import embedded_broker

    with embedded_broker(startup_timeout=startup_timeout) as bootstrap:
        yield bootstrap


def expectation_failures(suite: str | os.PathLike[str], rows: list[dict[str, Any]]) -> list[str]:
    """What the Great Expectations suite file ``suite`` (the document deep verification and the
    data-quality DAG read, :mod:`barrierflow.verification.deep`) finds wrong in ``rows`` (dicts
    of one table, built in the test): one line per failed expectation, empty when all pass.

    Raises:
        UserInputError: the file is not a suite (naming it).
    """
    import pandas as pd

    from barrierflow.verification.deep import load_suite_document, run_suite

    path = Path(suite)
    checks = run_suite(load_suite_document(path), pd.DataFrame(rows), str(path))
    return [f"{check.name}: {check.message}" for check in checks if not check.passed]
