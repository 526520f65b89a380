"""Spark's offset log ``offsets/<V>``: the plan of batch V, written before it runs.

File format: a version line (``v1``), a batch metadata JSON line (``batchWatermarkMs``,
``batchTimestampMs``, ``conf``), then one offset JSON line per source (``-`` or empty for a
source that had no offset yet). barrierflow's sources write their
:class:`~barrierflow.barriers.offsets.SourceOffset` there, so this log also records where
each barrier was injected. Read-only.

A source whose batches Spark plans itself (Spark's Kafka connector, ``reader: spark``) writes
its own offset line, ``{"<topic>": {"<partition>": <next offset>, ...}, ...}``, and is read
together with a barrier-only source whose line is barrierflow's format with
``"connector": "kafka"`` and no partitions (:mod:`barrierflow.sources.spark_kafka`). Every
reader here merges such a pair into one barrierflow offset (:func:`parse_offset_lines`): the
barrier and its trigger time from the barrier-only line, the partitions (``"topic:p"``, as
barrierflow's Kafka source spells them) from the connector's. So the rest of barrierflow (the
stage tracker, manifests, verification, sinks' batch ends) sees one source with one offset,
whichever reader wrote the log.
"""

from __future__ import annotations

import json
import os
from typing import Any

from barrierflow.spark._log import batch_ids, read_lines
from barrierflow.storage.object_dir import CheckpointDir, ObjectDir, as_checkpoint_dir

SUBDIR = "offsets"
#: The key of a barrier-only source's offset naming the connector whose offset line holds the cut.
CONNECTOR = "connector"


def planned_batches(checkpoint_dir: str | os.PathLike[str] | ObjectDir) -> list[int]:
    """Ids of every batch in the offset log, ascending."""
    return batch_ids(as_checkpoint_dir(checkpoint_dir) / SUBDIR)


def path_of(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> CheckpointDir:
    return as_checkpoint_dir(checkpoint_dir) / SUBDIR / str(batch_id)


def read_offsets(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> list[dict[str, Any] | None]:
    """The source offsets of batch ``batch_id``, one entry per source (None for a source
    that had no offset yet). Raises FileNotFoundError if the batch was never planned,
    :class:`~barrierflow.spark.errors.SparkLogError` for an unknown log version."""
    return parse_offset_lines(read_lines(path_of(checkpoint_dir, batch_id))[1:])


def parse_offset_lines(lines: list[str]) -> list[dict[str, Any] | None]:
    """The source offsets of an offset file's source lines (after the version line): one entry
    per source, None for a source without an offset yet; a connector's line and its barrier-only
    line merged into one (module docstring)."""
    out: list[dict[str, Any] | None] = []
    for line in lines:
        line = line.strip()
        out.append(None if not line or line == "-" else json.loads(line))
    return merge_connector_offsets(out)


def merge_connector_offsets(offsets: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    """``offsets`` with each barrier-only line (``"connector": "kafka"``) and the connector's
    line(s) beside it merged into one barrierflow offset (module docstring); unchanged when
    there is no barrier-only line."""
    markers = [o for o in offsets if isinstance(o, dict) and o.get(CONNECTOR) == "kafka"]
    if not markers:
        return offsets
    partitions: dict[str, int] = {}
    for other in offsets:
        if other is None or any(other is m for m in markers):
            continue
        partitions.update(kafka_partitions(other))
    merged = {**markers[0], "partitions": dict(sorted(partitions.items()))}
    return [merged]


def kafka_partitions(offset: dict[str, Any]) -> dict[str, int]:
    """Spark's Kafka connector offset ``{"topic": {"0": 12}}`` as ``{"topic:0": 12}``."""
    return {f"{topic}:{int(p)}": int(o) for topic, parts in offset.items() for p, o in parts.items()}


def first_source_partitions(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> dict[str, int] | None:
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


def source_line_count(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> int:
    """How many sources Spark planned batch ``batch_id`` with: its offset lines as written, a
    connector and its barrier-only source counted as the two sources Spark sees."""
    return len(read_lines(path_of(checkpoint_dir, batch_id))[1:])


def read_offset_metadata(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> dict[str, Any]:
    """The batch metadata line of ``offsets/V`` (batchWatermarkMs, batchTimestampMs, conf)."""
    return json.loads(read_lines(path_of(checkpoint_dir, batch_id))[0])


def planned_at(checkpoint_dir: str | os.PathLike[str] | ObjectDir, batch_id: int) -> float | None:
    """When Spark wrote ``offsets/V`` (epoch seconds), or None if it is gone."""
    try:
        return path_of(checkpoint_dir, batch_id).stat().st_mtime
    except FileNotFoundError:
        return None
