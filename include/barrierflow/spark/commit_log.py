"""Spark's commit log ``commits/<V>``: written after the sink committed batch V.

File format: a version line (``v1``) and a JSON line (``nextBatchWatermarkMs``). A batch is
committed exactly when its file exists; Spark replays ``offsets/V`` on restart when
``commits/V`` is missing. Read-only.
"""

from __future__ import annotations

import os

from barrierflow.spark._log import batch_ids, read_lines
from barrierflow.storage.object_dir import CheckpointDir, ObjectDir, as_checkpoint_dir

SUBDIR = "commits"


def committed_batches(checkpoint_dir: str | os.PathLike[str] | ObjectDir) -> list[int]:
    """Ids of every committed batch, ascending."""
    return batch_ids(as_checkpoint_dir(checkpoint_dir) / SUBDIR)


def latest_committed(checkpoint_dir: str | os.PathLike[str] | ObjectDir) -> int | None:
    batches = committed_batches(checkpoint_dir)
    return batches[-1] if batches else None


def path_of(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> CheckpointDir:
    return as_checkpoint_dir(checkpoint_dir) / SUBDIR / str(batch_id)


def check_version(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> None:
    """Raise :class:`~barrierflow.spark.errors.SparkLogError` if ``commits/V`` has an
    unknown log version (FileNotFoundError if it does not exist)."""
    read_lines(path_of(checkpoint_dir, batch_id))


def committed_at(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> float | None:
    """When Spark wrote ``commits/V`` (epoch seconds), or None if it is gone."""
    try:
        return path_of(checkpoint_dir, batch_id).stat().st_mtime
    except FileNotFoundError:
        return None
