"""Opening an :class:`ObjectStore` from a storage URI."""

from __future__ import annotations

from pathlib import Path

from barrierflow.errors import UserInputError
from barrierflow.storage.object_store import ObjectStore


def local_path_of(uri: str) -> Path:
    """The directory of a ``file://`` URI; relative paths resolve against the project home."""
    from barrierflow.spec.paths import project_home

    raw = uri.removeprefix("file://")
    path = Path(raw)
    return path if path.is_absolute() else project_home() / path


def open_store(uri: str) -> ObjectStore:
    """Return the backend for ``uri``: ``file://PATH`` or ``s3://BUCKET/PREFIX``.

    S3 endpoint, region and credentials come from the standard AWS environment variables
    (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``) or the instance's role; never from the spec.
    """
    if uri.startswith("file://"):
        from barrierflow.storage.local import LocalObjectStore

        return LocalObjectStore(local_path_of(uri), uri=uri)
    if uri.startswith("s3://"):
        from barrierflow.storage.s3 import S3ObjectStore

        return S3ObjectStore.from_uri(uri)
    raise UserInputError(f"unsupported storage URI {uri!r}: use file://PATH or s3://BUCKET/PREFIX")
