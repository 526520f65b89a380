"""Local files and directories replaced whole: the library's only temp-then-rename.

:func:`write_atomic`: a reader of the target (another process, a restart after a crash) sees the
old content or the new one, never a part: the new content is written to a temporary name beside
the target (same directory, so the same file system) and renamed onto it (``os.replace``:
atomic on POSIX, and it replaces an existing file). A failure while writing removes the
temporary file (or tree) and leaves the target as it was.

:func:`replace_directory`: a finished directory takes the place of a directory that may exist
and is not empty, which ``os.replace`` cannot do. On Linux the two trade places in one step
(``renameat2`` with ``RENAME_EXCHANGE``), so the target path always holds a whole tree, the old
or the new; elsewhere (or on a file system without the exchange) the old tree is renamed aside
first, so a crash between the two renames leaves the target missing and both trees on disk.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["replace_directory", "write_atomic"]

#: ``renameat2``'s "relative to the working directory" and its flag that swaps two paths (Linux).
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


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


def _exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    platform, the C library or the file system has no such call (nothing was changed then).

    Raises:
        OSError: the call exists and failed for another reason (nothing was changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def replace_directory(new: str | os.PathLike[str], target: str | os.PathLike[str], *,
                      keep_old: str | os.PathLike[str] | None = None) -> Path | None:
    """Put the finished directory ``new`` at ``target`` (same file system), replacing a directory
    already there (see the module docstring for when the swap is one step).

    ``keep_old``: where the replaced tree is kept (an older one there is removed first); without
    it the replaced tree is deleted. Returns where the replaced tree was kept, or None when
    ``target`` did not exist or nothing was kept.

    Raises:
        OSError: ``new`` could not be moved; ``target`` is then as it was (the fallback moves the
            old tree back when the second rename fails).
    """
    new, target = Path(new), Path(target)
    if not target.exists():
        os.replace(new, target)
        return None
    if keep_old is not None:
        shutil.rmtree(keep_old, ignore_errors=True)
    if _exchange(new, target):  # ``new`` now holds the replaced tree
        old = new
    else:
        old = target.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-{target.name}.replaced")
        os.replace(target, old)
        try:
            os.replace(new, target)
        except BaseException:
            os.replace(old, target)
            raise
    if keep_old is None:
        shutil.rmtree(old, ignore_errors=True)
        return None
    os.replace(old, keep_old)
    return Path(keep_old)
