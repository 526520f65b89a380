"""The committed lake output of a pipeline, as the batch side sees it.

Only files the Parquet sink *published* count: ``part-<batch>-a<attempt>-<n>.parquet`` in the
sink's root (listed by :func:`barrierflow.sinks.parquet.committed_parts`, which owns that
layout). Write-ahead micro-batches (``_staging/``) are invisible here by construction: the listing is
of the root's ``part-`` prefix, never a directory scan that could pick up another folder.
"""

from __future__ import annotations

from barrierflow.errors import UserInputError
from barrierflow.sinks.parquet import CommittedPart, committed_parts, parquet_sink, rollups_uri
from barrierflow.storage.uri import local_path_of

__all__ = ["CommittedPart", "committed_parts", "parquet_sink", "rollups_uri", "spark_path"]


def spark_path(uri: str, key: str = "") -> str:
    """A storage URI (plus a key under it) as a path Spark reads: an absolute local path for
    ``file://``, ``s3a://`` for ``s3://`` (needs hadoop-aws on the Spark classpath)."""
    if uri.startswith("file://"):
        base = str(local_path_of(uri))
    elif uri.startswith("s3://"):
        base = "s3a://" + uri[len("s3://"):].rstrip("/")
    else:
        raise UserInputError(f"unsupported storage URI {uri!r}: expected file://PATH or s3://BUCKET/PREFIX")
    return f"{base.rstrip('/')}/{key}" if key else base
