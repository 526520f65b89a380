"""Where the replay of a state rebuild starts when a broker retains the stage's input (a Kafka
source): the bounded range of records the new definition's state at the savepoint needs.

A generator's input is computed from offset 0 and can always be replayed whole. A Kafka topic
holds what its retention left, so :mod:`barrierflow.upgrade.rebuild` replays only the records
the new state needs, ``[start, until)`` per partition, ``until`` being the savepoint's barrier
offsets (the continuation reads on from there, exactly where the old run stopped):

* every stateful operator of the new stage is a **windowed aggregation** (tumbling or sliding,
  its longest window ``L``): at the savepoint's watermark ``W`` (``batchWatermarkMs`` of its
  barrier batch) the windows still open are those ending after ``W``, which began after
  ``W - L``; their records have event times after ``W - L``. ``start`` is the earliest offset
  whose Kafka record timestamp is at or after ``W - L`` (the broker's offsets-for-times). Every
  older window was closed at the savepoint (its output already written): the replay may read
  some of its records, and the eviction at ``W`` drops them again, unwritten.
* any other state (an unwindowed aggregation, deduplication, a join, a session window) may hold
  keys from the pipeline's first record on: ``start`` is the pipeline's first offset
  (:func:`first_offsets`), which the topic must still hold.

The range is **covered** when the broker still holds ``start``: in a partition whose oldest
retained offset ``R`` (its log start offset) is below ``start``, or equal to it when nothing the
pipeline read was deleted (``R`` not past the pipeline's first offset). Otherwise the records the
open windows need begin in what the broker deleted, and :class:`RetentionNotCoveredError` names,
per partition, the offset needed (or that it lies below ``R``, when the broker no longer holds
the records that would tell) and ``R``, and the alternative: a new pipeline started at the
savepoint's offsets (:func:`alternative`).

Assumes a record's Kafka timestamp is not older than its event time (true for timestamps the
producer or the broker stamps when the record is sent, after the event happened; exact when the
event-time column is the record's ``timestamp``) and that timestamps grow with offsets within a
partition, as Kafka's offsets-for-times does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from barrierflow.errors import UserInputError

if TYPE_CHECKING:
    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.pipeline.model import Stage
    from barrierflow.spec.models import KafkaSourceSpec

__all__ = ["PartitionRange", "ReplayRange", "RetentionNotCoveredError", "alternative", "first_offsets",
           "partition_range", "plan_replay", "replay_since_ms"]

_SECONDS = re.compile(r"([0-9.]+) s")


class RetentionNotCoveredError(UserInputError):
    """The broker no longer holds every record the rebuilt state needs (the message names, per
    partition, the offset needed and the oldest retained, and the alternative). Nothing was
    changed."""


@dataclass(frozen=True)
class PartitionRange:
    """One partition of a replay: the first offset the new state needs (None: below
    ``retained``, in records the broker deleted, so not known), the oldest offset the broker
    retains, the savepoint's offset (the replay's end) and whether the broker holds the range."""

    partition: str
    needed: int | None
    retained: int
    until: int
    covered: bool
    #: why ``needed`` is None when it is not that the broker deleted the records that would say
    unknown: str = ""

    def describe(self) -> str:
        needed = (f"oldest offset needed {self.needed}" if self.needed is not None else
                  f"oldest offset needed unknown ({self.unknown})" if self.unknown else
                  f"oldest offset needed below {self.retained} (the broker deleted the records that would say which)")
        return f"{self.partition}: {needed}, oldest retained {self.retained}, savepoint at {self.until}"


@dataclass(frozen=True)
class ReplayRange:
    """The bounded replay of one stage: ``start`` and ``until`` per partition (``topic:p``),
    ``since_ms`` the event time from which records are needed (None: every record from the
    pipeline's first, for state that is not windowed), ``partitions`` each partition's answer."""

    source: str
    start: dict[str, int]
    until: dict[str, int]
    since_ms: int | None
    partitions: tuple[PartitionRange, ...]

    @property
    def covered(self) -> bool:
        return all(p.covered for p in self.partitions)

    @property
    def records(self) -> int:
        """Offsets the replay reads (an upper bound of its records: transaction markers count)."""
        return sum(max(0, self.until[p] - s) for p, s in self.start.items())

    def describe(self) -> str:
        since = ("every record from the pipeline's first (its state is not windowed)" if self.since_ms is None else
                 f"the records from {_iso(self.since_ms)} on (the oldest window open at the savepoint)")
        return f"source {self.source}: {since}, offsets {json.dumps(self.start)} to {json.dumps(self.until)}"


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=UTC).isoformat()


def _window_seconds(entry: Mapping[str, Any]) -> float | None:
    """The longest window of a fingerprint entry (``"window": "60 s"`` or ``"10 s, 60 s"``),
    None when it is no windowed aggregation (or a session window, which has no bounded length)."""
    window = entry.get("window")
    keys = " ".join(str(k) for k in entry.get("grouping keys", []))
    if entry.get("operator") != "Aggregate" or not window or "session" in keys.lower():
        return None
    sizes = [float(n) for n in _SECONDS.findall(str(window))]
    return max(sizes) if sizes else None


def replay_since_ms(fingerprint: list[dict[str, Any]], watermark_ms: int) -> int | None:
    """The event time (epoch ms) from which the state of a stage with the stateful operators
    ``fingerprint`` (the new spec's, :func:`~barrierflow.runtime.state_compat.planned_fingerprint`)
    needs its records at watermark ``watermark_ms``: the watermark minus its longest window when
    every stateful operator is a windowed aggregation, else None (every record)."""
    stores = [e for e in fingerprint if e.get("operator") != "EventTimeWatermark"]
    lengths = [_window_seconds(e) for e in stores]
    if not stores or any(length is None for length in lengths):
        return None
    return int(watermark_ms - max(float(x) for x in lengths if x is not None) * 1000)


def first_offsets(source: KafkaSourceSpec, partitions: list[str]) -> dict[str, int | None]:
    """The offset of each partition at which the pipeline began reading, as far as its spec
    tells: ``earliest`` (or ``-2``, or a partition not named) at most 0, an explicit offset that
    offset, ``latest`` (``-1``) not known (None). An ``earliest`` topic whose oldest records were
    already deleted when the pipeline started began later: 0 is the safe answer."""
    from barrierflow.kafka_io.partition_ids import parse_partition_id

    wanted = source.starting_offsets
    out: dict[str, int | None] = {}
    for key in partitions:
        topic, number = parse_partition_id(key)
        if wanted == "latest":
            out[key] = None
            continue
        offset = -2 if wanted == "earliest" else int(wanted.get(topic, {}).get(str(number), -2))
        out[key] = 0 if offset == -2 else None if offset < 0 else offset
    return out


def alternative(pipeline: str, source: str, until: Mapping[str, int]) -> str:
    """The documented way forward when the broker no longer holds what a rebuild needs: a new
    pipeline started at the savepoint's offsets (``until``), printed as ``starting_offsets``."""
    from barrierflow.kafka_io.partition_ids import starting_offsets_form

    return (f"start the new spec as a new pipeline (another name, work_dir and checkpoint.storage) at the savepoint's "
            f"offsets, with its source {source} given\n  starting_offsets: {json.dumps(starting_offsets_form(until))}\n"
            f"its state starts empty there (windows open at the savepoint miss their records before it), and "
            f"pipeline {pipeline}'s savepoint stays as it is")


def partition_range(partition: str, end: int, oldest: int, began: int | None, at: int | None, *,
                    windowed: bool) -> PartitionRange:
    """One partition's answer (module docstring): ``end`` the savepoint's offset, ``oldest`` the
    oldest the broker retains, ``began`` the pipeline's first offset (None: not known), ``at``
    the broker's offsets-for-times answer (None: no record at or after the time; ``windowed``
    False: not asked, every record from ``began`` is needed)."""
    if not windowed:
        if began is None:
            return PartitionRange(partition, None, oldest, end, False,
                                  "the pipeline started at starting_offsets latest, which no checkpoint records")
        return PartitionRange(partition, began, oldest, end, oldest <= began or began >= end)
    needed = end if at is None or at > end else at
    if began is not None:  # never a record from before the pipeline's first (it never read those)
        needed = min(max(needed, began), end)
    unharmed = began is not None and oldest <= began  # nothing the pipeline read was deleted
    covered = needed > oldest or (needed == oldest and unharmed)
    return PartitionRange(partition, needed if covered else None, oldest, end, covered)


def plan_replay(stage: Stage, store: CheckpointStore, manifest: Manifest, fingerprint: list[dict[str, Any]], *,
                pipeline: str) -> ReplayRange:
    """The bounded replay of ``stage`` (the new spec's; its source a Kafka source) for savepoint
    ``manifest`` (its part, in ``store``) and the new spec's stateful operators ``fingerprint``
    (module docstring). Asks the brokers (offsets-for-times, log start offsets); reads no record.

    Raises:
        RetentionNotCoveredError: the broker no longer holds a record the new state needs.
        SourceError: the brokers cannot be reached, or a topic does not exist.
    """
    from barrierflow.batch.recompute import barrier_watermark
    from barrierflow.kafka_io.admin import beginning_offsets, offsets_for_times

    source = stage.spec.source
    until = {p: int(o) for p, o in manifest.barrier_offsets.get(source.name, {}).items()}
    watermark = barrier_watermark(store, manifest)
    since = replay_since_ms(fingerprint, int(watermark.timestamp() * 1000))
    retained = beginning_offsets(source)  # type: ignore[arg-type]
    first = first_offsets(source, sorted(until))  # type: ignore[arg-type]
    # (a watermark still at its start, 0, puts `since` before the epoch: every record is needed;
    # Kafka reads a negative timestamp as "latest" or "earliest", so ask for 0)
    found = offsets_for_times(source, max(0, since)) if since is not None else {}  # type: ignore[arg-type]
    parts = [partition_range(p, until[p], retained.get(p, 0), first[p], found.get(p), windowed=since is not None)
             for p in sorted(until)]
    plan = ReplayRange(source.name, {p.partition: p.needed if p.needed is not None else p.retained for p in parts},
                       until, since, tuple(parts))
    if not plan.covered:
        since_text = (f"the records from {_iso(since)} on (the savepoint's watermark {watermark.isoformat()} "
                      "minus the new definition's longest window: the oldest window still open)"
                      if since is not None else "every record from the pipeline's first (its state is not windowed)")
        missing = "; ".join(p.describe() for p in parts if not p.covered)
        raise RetentionNotCoveredError(
            f"stage {stage.name} of pipeline {pipeline}: rebuilding its state needs {since_text} of Kafka source "
            f"{source.name}, and the broker no longer holds all of them: {missing}. The way forward: "
            f"{alternative(pipeline, source.name, until)}. Nothing was changed.")
    return plan
