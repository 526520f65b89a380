"""Read-only access to Spark's own streaming checkpoint logs (``offsets/``, ``commits/``).

Spark writes ``offsets/V`` (the batch plan: a version line, a metadata JSON line, then one
offset JSON line per source) before running batch V and ``commits/V`` after the sink
committed it. barrierflow never writes into a live Spark checkpoint; it only reads these
files to find barrier batches (see :mod:`barrierflow.sources.offsets`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _batch_ids(directory: Path) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def committed_batches(checkpoint_dir: str | os.PathLike[str]) -> list[int]:
    return _batch_ids(Path(checkpoint_dir) / "commits")


def planned_batches(checkpoint_dir: str | os.PathLike[str]) -> list[int]:
    return _batch_ids(Path(checkpoint_dir) / "offsets")


def latest_committed(checkpoint_dir: str | os.PathLike[str]) -> int | None:
    batches = committed_batches(checkpoint_dir)
    return batches[-1] if batches else None


def read_offsets(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> list[dict[str, Any] | None]:
    """The source offsets of batch ``batch_id``, one entry per source (None for a source
    that had no offset yet). Raises FileNotFoundError if the batch was never planned."""
    text = (Path(checkpoint_dir) / "offsets" / str(batch_id)).read_text(encoding="utf-8")
    lines = text.splitlines()
    out: list[dict[str, Any] | None] = []
    for line in lines[2:]:
        line = line.strip()
        out.append(None if not line or line == "-" else json.loads(line))
    return out


def read_offset_metadata(checkpoint_dir: str | os.PathLike[str], batch_id: int) -> dict[str, Any]:
    """The batch metadata line of ``offsets/V`` (batchWatermarkMs, batchTimestampMs, conf)."""
    text = (Path(checkpoint_dir) / "offsets" / str(batch_id)).read_text(encoding="utf-8")
    return json.loads(text.splitlines()[1])
