"""Local files replaced whole: :func:`write_atomic`, the one temp-then-rename of the library.

A reader of the target (another process, a restart after a crash) sees the old content or the
new one, never a part: the new content is written to a temporary name beside the target (same
directory, so the same file system) and renamed onto it (``os.replace``: atomic on POSIX, and
it replaces an existing file). A failure while writing removes the temporary file (or tree) and
leaves the target as it was.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], content: str | bytes | Callable[[Path], object], *,
                 durable: bool = False, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``content`` atomically; returns ``path`` as a Path.

    ``content``: text (written with ``encoding``), bytes, or a function given the temporary
    path to fill (a download, a zip, a directory tree; what it returns is ignored). The parent
    directory is created when missing. ``durable``: the file's bytes are flushed to disk
    (``fsync``) before the rename, so a power loss after the call keeps the new content.

    Raises:
        OSError: the file could not be written or renamed (the target is unchanged); whatever
            ``content`` raises, after the temporary file is removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # ".tmp-" first: the local object store never lists such names; ".tmp" last: no glob for the
    # target's own suffix (``*.json``) matches it.
    tmp = target.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{target.name}.tmp")
    try:
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        elif isinstance(content, str):
            tmp.write_text(content, encoding=encoding)
        else:
            content(tmp)
        if durable and tmp.is_file():
            with open(tmp, "rb+") as written:
                os.fsync(written.fileno())
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
    return target
