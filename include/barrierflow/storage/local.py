"""Local-directory object store (``file://PATH``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import StorageError
from barrierflow.storage.object_store import ObjectInfo, ObjectNotFoundError, ObjectStore


class LocalObjectStore(ObjectStore):
    """Objects are files below ``root``; temporary files start with ``.tmp-`` and are
    never listed."""

    def __init__(self, root: str | os.PathLike[str], uri: str | None = None) -> None:
        self.root = Path(root)
        self.uri = uri or f"file://{self.root}"

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key {key!r} (must be relative, without '..')")
        return self.root / key

    def _atomic_write(self, key: str, write: object) -> None:
        try:
            write_atomic(self._path(key), write, durable=True)  # type: ignore[arg-type]
        except OSError as exc:
            raise StorageError(f"cannot write {self.describe(key)}: {exc}") from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        self._atomic_write(key, lambda tmp: tmp.write_bytes(data))

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        """A local copy has no transport to check: ``sha256`` is not used."""
        self._atomic_write(key, lambda tmp: shutil.copyfile(local_path, tmp))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write ``data`` to a temporary file (fsynced), then hard-link it to the key's name:
        ``link`` fails with EEXIST if the name exists, so the object appears whole, at most
        once, and an existing one is never replaced (unlike ``rename``)."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                return True
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        except OSError as exc:
            raise StorageError(f"cannot create {self.describe(key)}: {exc}") from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise ObjectNotFoundError(self.describe(key)) from None
        except OSError as exc:
            raise StorageError(f"cannot read {self.describe(key)}: {exc}") from exc

    def download_file(self, key: str, local_path: str) -> None:
        try:
            shutil.copyfile(self._path(key), local_path)
        except FileNotFoundError:
            raise ObjectNotFoundError(self.describe(key)) from None
        except OSError as exc:
            raise StorageError(f"cannot read {self.describe(key)}: {exc}") from exc

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        base = self.root
        if not base.exists():
            return []
        out: list[ObjectInfo] = []
        # Walk only the deepest directory that can hold keys with this prefix.
        if not prefix:
            walk_root = base
        elif prefix.endswith("/"):
            walk_root = self._path(prefix.rstrip("/"))
        else:
            walk_root = self._path(prefix).parent
        if not walk_root.is_dir():
            return []
        for dirpath, _dirs, files in os.walk(walk_root):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(base).as_posix()
                if key.startswith(prefix):
                    try:
                        st = full.stat()
                    except FileNotFoundError:
                        continue
                    # Every write replaces the file (temp + rename): a new inode, so a new tag.
                    out.append(ObjectInfo(key, st.st_size, f"{st.st_ino:x}-{st.st_mtime_ns:x}", st.st_mtime))
        out.sort(key=lambda o: o.key)
        return out

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def move(self, src: str, dst: str) -> None:
        target = self._path(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self._path(src), target)
        except FileNotFoundError:
            raise ObjectNotFoundError(self.describe(src)) from None
