"""Spark's checkpoint on object storage, as the driver reads and writes it.

A spec whose ``work_dir`` is ``s3://BUCKET/PREFIX`` (or ``s3a://``) has Spark write its own
checkpoint (offsets, commits, state files) through Hadoop's S3A file system to
``s3a://BUCKET/PREFIX/spark-checkpoint`` (:mod:`barrierflow.spark.s3a`), where every executor
reaches it without a shared file system. barrierflow's driver-side code reads that checkpoint
(the commit and offset logs, the state files a snapshot needs) and writes it (a restore, the
state fingerprint) through :class:`ObjectDir`, a small path-like view of one directory of it
backed by barrierflow's S3 store (same credentials and endpoint as the checkpoint store: the
standard AWS environment).

:class:`ObjectDir` offers the part of :class:`pathlib.Path` those readers use (``/``, ``name``,
``exists``, ``is_file``, ``is_dir``, ``read_text``, ``read_bytes``, ``write_text``, ``stat``,
``unlink``) plus :meth:`ObjectDir.listdir` and :meth:`ObjectDir.listing`; a missing object
raises :class:`FileNotFoundError`, as a missing local file does, so callers handle both alike.
``str()`` is the ``s3a://`` URI Spark is given.

:func:`as_checkpoint_dir` turns what a caller holds (a local path, an ``s3://``/``s3a://`` URI
string or an :class:`ObjectDir`) into the one or the other; :func:`listdir` lists either.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Union

from barrierflow.storage.object_store import ObjectInfo, ObjectNotFoundError, ObjectStore
from barrierflow.storage.uri import open_store

#: URI schemes of a work dir on object storage.
OBJECT_SCHEMES = ("s3://", "s3a://")
#: How often the driver's loops look for new batches in logs on object storage (each look is a
#: LIST request; on a local disk they look every tick).
LOG_POLL_SECONDS = 0.25


def is_object_uri(value: object) -> bool:
    """Whether ``value`` is an ``s3://`` or ``s3a://`` URI string."""
    return isinstance(value, str) and value.startswith(OBJECT_SCHEMES)


def store_uri(uri: str) -> str:
    """``s3a://B/P`` (Hadoop's spelling) as ``s3://B/P`` (barrierflow's storage spelling)."""
    return "s3://" + uri.split("://", 1)[1] if uri.startswith("s3a://") else uri


def hadoop_uri(uri: str) -> str:
    """``s3://B/P`` as ``s3a://B/P``: the scheme of Hadoop's S3A file system."""
    return "s3a://" + uri.split("://", 1)[1] if uri.startswith("s3://") else uri


@dataclass(frozen=True)
class ObjectDir:
    """One path below the root of a Spark checkpoint on object storage (module docstring).

    Attributes:
        root: the checkpoint's root, ``s3://BUCKET/PREFIX/spark-checkpoint``.
        rel: the path below it ('/'-separated, ``""`` for the root itself).
    """

    root: str
    rel: str = ""

    @property
    def store(self) -> ObjectStore:
        """The store rooted at :attr:`root` (built once per process and root)."""
        return _store(self.root)

    def __truediv__(self, name: str | os.PathLike[str]) -> ObjectDir:
        part = Path(name).as_posix().strip("/")
        return ObjectDir(self.root, f"{self.rel}/{part}" if self.rel else part)

    def __str__(self) -> str:
        base = hadoop_uri(self.root).rstrip("/")
        return f"{base}/{self.rel}" if self.rel else base

    @property
    def uri(self) -> str:
        """The ``s3://`` URI of this path (barrierflow's storage spelling)."""
        return f"{self.root.rstrip('/')}/{self.rel}" if self.rel else self.root

    @property
    def name(self) -> str:
        return (self.rel or self.root.rstrip("/")).rsplit("/", 1)[-1]

    def relative_to(self, other: ObjectDir) -> Path:
        """This path relative to ``other`` (both below one root), as a relative :class:`Path`."""
        if other.root != self.root:
            raise ValueError(f"{self} is not below {other}")
        return Path(self.rel).relative_to(other.rel or ".") if other.rel else Path(self.rel or ".")

    def listing(self) -> dict[str, ObjectInfo]:
        """Every object below this path (recursively): its key relative to this path -> info."""
        prefix = f"{self.rel}/" if self.rel else ""
        return {info.key[len(prefix):]: info for info in self.store.list(prefix)}

    def listdir(self) -> list[str]:
        """The names directly below this path (files and directories), sorted; [] when empty."""
        return sorted({key.split("/", 1)[0] for key in self.listing()})

    def _info(self) -> ObjectInfo | None:
        if not self.rel:
            return None
        return next((info for info in self.store.list(self.rel) if info.key == self.rel), None)

    def is_file(self) -> bool:
        return self._info() is not None

    def is_dir(self) -> bool:
        prefix = f"{self.rel}/" if self.rel else ""
        return bool(self.store.list(prefix))

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def read_bytes(self) -> bytes:
        try:
            return self.store.get_bytes(self.rel)
        except ObjectNotFoundError:
            raise FileNotFoundError(str(self)) from None

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> None:
        """One PUT: readers see the old object or the whole new one."""
        self.store.put_bytes(self.rel, data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def stat(self) -> SimpleNamespace:
        """``st_size`` and ``st_mtime`` (the object's last modification); FileNotFoundError if absent."""
        info = self._info()
        if info is None:
            raise FileNotFoundError(str(self))
        return SimpleNamespace(st_size=info.size, st_mtime=info.modified)

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(str(self))
        self.store.delete(self.rel)

    def remove_tree(self) -> int:
        """Delete every object below this path; the number deleted."""
        prefix = f"{self.rel}/" if self.rel else ""
        keys = [f"{prefix}{key}" for key in self.listing()]
        self.store.delete_many(keys)
        return len(keys)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: object storage has no directories."""


#: A Spark checkpoint directory as the driver holds it: a local path, or one on object storage.
CheckpointDir = Union[Path, ObjectDir]  # noqa: UP007  # a runtime alias, used in isinstance checks too

_STORES: dict[str, ObjectStore] = {}


def _store(root: str) -> ObjectStore:
    store = _STORES.get(root)
    if store is None:
        store = _STORES[root] = open_store(store_uri(root))
    return store


def as_checkpoint_dir(value: str | os.PathLike[str] | ObjectDir) -> CheckpointDir:
    """``value`` as a local :class:`Path`, or as an :class:`ObjectDir` for an ``s3://``/``s3a://`` URI."""
    if isinstance(value, ObjectDir):
        return value
    if is_object_uri(value):
        return ObjectDir(store_uri(str(value)).rstrip("/"))
    return Path(value)


class PollThrottle:
    """Whether a loop polling ``directory`` may look again: always for a local directory, at
    most every :data:`LOG_POLL_SECONDS` for one on object storage."""

    def __init__(self, directory: CheckpointDir, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = LOG_POLL_SECONDS if isinstance(directory, ObjectDir) else 0.0
        self.clock = clock
        self.next_at = 0.0

    def due(self) -> bool:
        if not self.every:
            return True
        now = self.clock()
        if now < self.next_at:
            return False
        self.next_at = now + self.every
        return True


def listdir(directory: CheckpointDir) -> list[str]:
    """The names in ``directory``; FileNotFoundError for a missing local directory ([] for an
    empty or absent one on object storage, which has no directories)."""
    if isinstance(directory, ObjectDir):
        return directory.listdir()
    return os.listdir(directory)
