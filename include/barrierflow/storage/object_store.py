"""The object-store interface shared by the checkpoint store, sinks and dead letters.

Keys are ``/``-separated paths relative to the store's root URI. Contract of every backend:

* ``put_bytes``/``put_file`` are atomic: a reader sees the whole object or none of it
  (local: write to a temporary name in the same directory, fsync, rename; S3: one PUT).
* ``get_bytes``/``download_file`` raise :class:`ObjectNotFoundError` for a missing key.
* ``list`` returns every object under a prefix (recursively), sorted by key.
* ``delete`` of a missing key is a no-op (idempotent).
* ``put_if_absent`` creates a key only if no object has it, atomically (of two concurrent
  callers exactly one gets True), and never overwrites: the primitive the job lease, the
  fencing records, manifests and ledger decisions are built on
  (:mod:`barrierflow.lease`). Local: a hard link of a fully written temporary file
  (``link`` fails if the name exists); S3: ``PutObject`` with ``If-None-Match: *``. An endpoint
  that cannot do it raises :class:`ConditionalWriteUnsupportedError`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from barrierflow.errors import StorageError


class ObjectNotFoundError(StorageError):
    """The key does not exist in the store."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(f"{uri} does not exist")


class ConditionalWriteUnsupportedError(StorageError):
    """The store's endpoint cannot create an object only if it is absent (S3 ``If-None-Match``)."""


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size and, where the backend lists them, its entity tag and
    last modification (epoch seconds; 0.0 where not listed). Two infos are equal when key and
    size are."""

    key: str
    size: int
    etag: str = field(default="", compare=False)
    modified: float = field(default=0.0, compare=False)


class ObjectStore(abc.ABC):
    """A flat key space under a root URI (``file://...`` or ``s3://bucket/prefix``)."""

    uri: str

    def describe(self, key: str) -> str:
        """The full URI of ``key``, for messages."""
        return f"{self.uri.rstrip('/')}/{key}"

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        """Store the file at ``local_path`` as ``key``. ``sha256``: the file's content hash as
        64 hex digits, when the caller already knows it (content-addressed checkpoint files): a
        store that can have the receiving end check it does (S3: the PUT carries it and the
        server refuses a body that does not match), one that cannot ignores it."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` if no object has that key; True if this call created
        it, False if it existed (nothing written). Atomic and never overwriting (see the
        module docstring)."""

    def check_conditional_writes(self, probe_key: str) -> None:
        """Raise :class:`ConditionalWriteUnsupportedError` if :meth:`put_if_absent` cannot be
        relied on at this store's endpoint (S3 probes it with ``probe_key``; local files always can)."""
        return None

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def download_file(self, key: str, local_path: str) -> None: ...

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None if it does not exist."""

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None: ...

    def delete_many(self, keys: list[str]) -> None:
        for key in keys:
            self.delete(key)

    def copy(self, src: str, dst: str) -> None:
        """Copy ``src`` to ``dst`` atomically (default: read then put)."""
        self.put_bytes(dst, self.get_bytes(src))

    def move(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``; ``dst`` appears atomically. Not atomic as a whole on S3."""
        self.copy(src, dst)
        self.delete(src)
