"""The object-store interface shared by the checkpoint store, sinks and dead letters.

Keys are ``/``-separated paths relative to the store's root URI. Contract of every backend:

* ``put_bytes``/``put_file`` are atomic: a reader sees the whole object or none of it
  (local: write to a temporary name in the same directory, fsync, rename; S3: one PUT).
* ``get_bytes``/``download_file`` raise :class:`ObjectNotFoundError` for a missing key.
* ``list`` returns every object under a prefix (recursively), sorted by key.
* ``delete`` of a missing key is a no-op (idempotent).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from barrierflow.errors import StorageError


class ObjectNotFoundError(StorageError):
    """The key does not exist in the store."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(f"{uri} does not exist")


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(abc.ABC):
    """A flat key space under a root URI (``file://...`` or ``s3://bucket/prefix``)."""

    uri: str

    def describe(self, key: str) -> str:
        """The full URI of ``key``, for messages."""
        return f"{self.uri.rstrip('/')}/{key}"

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def put_file(self, key: str, local_path: str) -> None: ...

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
