"""The key of a Kafka partition in barrierflow's offset JSON: ``"<topic>:<partition>"``.

Kafka topic names cannot contain ``:``, so the key is split at its last one. The Kafka and
channel sources key their offsets by it (:mod:`barrierflow.barriers.offsets`), and so do the
offset lookups of :mod:`barrierflow.kafka_io.admin` and the dead letters of
:mod:`barrierflow.kafka_io.decoding`.
"""

from __future__ import annotations

from collections.abc import Mapping

from barrierflow.errors import SourceError


def partition_id(topic: str, partition: int) -> str:
    """The source-partition key of ``topic``/``partition`` in the offset JSON."""
    return f"{topic}:{partition}"


def parse_partition_id(key: str) -> tuple[str, int]:
    """Inverse of :func:`partition_id`; raises :class:`SourceError` for a malformed key."""
    topic, sep, number = key.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise SourceError(
            f"not a Kafka source partition {key!r} (expected 'topic:partition'); was this Spark "
            "checkpoint written by another source? Use a fresh work_dir."
        )
    return topic, int(number)


def starting_offsets_form(offsets: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Offsets keyed by :func:`partition_id` (``{"clicks:0": 120}``) in the form a Kafka
    source's ``starting_offsets`` takes (``{"clicks": {"0": 120}}``), topics and partitions
    sorted: what a new pipeline that starts where these offsets are is given."""
    out: dict[str, dict[str, int]] = {}
    for key in sorted(offsets, key=parse_partition_id):
        topic, number = parse_partition_id(key)
        out.setdefault(topic, {})[str(number)] = int(offsets[key])
    return out
