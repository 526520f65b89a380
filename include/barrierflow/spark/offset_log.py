"""Spark's offset log ``offsets/<V>``: the plan of batch V, written before it runs.

File format: a version line (``v1``), a batch metadata JSON line (``batchWatermarkMs``,
``batchTimestampMs``, ``conf``), then one offset JSON line per source (``-`` or empty for a
source that had no offset yet). barrierflow's sources write their
:class:`~barrierflow.barriers.offsets.SourceOffset` there, so this log also records where
each barrier was injected. Read-only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from barrierflow.spark._log import batch_ids, read_lines

SUBDIR = "offsets"


def planned_batches(checkpoint_dir: str | os.PathLike[str]) -> list[int]:
    """Ids of every batch in the offset log, ascending."""
    return batch_ids(Path(checkpoint_dir) / SUBDIR)


def path_of(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> Path:
    return Path(checkpoint_dir) / SUBDIR / str(batch_id)


def read_offsets(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> list[dict[str, Any] | None]:
    """The source offsets of batch ``batch_id``, one entry per source (None for a source
    that had no offset yet). Raises FileNotFoundError if the batch was never planned,
    :class:`~barrierflow.spark.errors.SparkLogError` for an unknown log version."""
    lines = read_lines(path_of(checkpoint_dir, batch_id))
    out: list[dict[str, Any] | None] = []
    for line in lines[1:]:
        line = line.strip()
        out.append(None if not line or line == "-" else json.loads(line))
    return out


def first_source_partitions(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> dict[str, int] | None:
    """The end offsets per partition of the first source in batch ``batch_id``, or None when
    the batch is not in the log (purged, never planned) or that source had no offset."""
    try:
        offsets = read_offsets(checkpoint_dir, batch_id)
    except FileNotFoundError:
        return None
    first = offsets[0] if offsets else None
    if first is None:
        return None
    return {str(p): int(o) for p, o in first.get("partitions", {}).items()}


def read_offset_metadata(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> dict[str, Any]:
    """The batch metadata line of ``offsets/V`` (batchWatermarkMs, batchTimestampMs, conf)."""
    return json.loads(read_lines(path_of(checkpoint_dir, batch_id))[0])


def planned_at(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> float | None:
    """When Spark wrote ``offsets/V`` (epoch seconds), or None if it is gone."""
    try:
        return path_of(checkpoint_dir, batch_id).stat().st_mtime
    except FileNotFoundError:
        return None
