"""The batch planner: the one place that decides how far each partition advances.

Pure and deterministic: :func:`plan_batch` maps a :class:`PlanRequest` to a
:class:`BatchPlan` and touches nothing else. Sources call it from ``latestOffset``.

Rules, in order:

1. **Hold** (the synchronous-snapshot baseline, or an operator pause): every partition stays
   where it is and no barrier is injected; Spark then plans no batch. **Barriers only** (a
   stop's savepoint, a canary waiting for a verification): every partition stays where it is,
   but a requested barrier is injected: a batch that reads nothing carries it.
2. **Advance**: each partition moves to ``min(available, start + max_records_per_partition)``
   and never backwards; paused partitions (watermark alignment) stay put, and a partition with
   an entry in ``partition_caps`` (watermark alignment's event-time ceiling) ends at most there.
   During a replay of committed epochs after a restore (``replay_end`` given; see
   :mod:`barrierflow.barriers.replay_plan`) the batch ends exactly at the recorded end offsets
   instead, whatever is available and whatever the batch size limit.
3. **Barrier**: if a checkpoint ``n`` newer than the last injected barrier is requested, this
   batch closes epoch ``n``: the plan carries ``barrier = n``. A batch is never planned
   across a barrier, because the barrier position *is* the batch's end offsets for every
   partition at once (all partitions are cut at the same batch boundary = aligned).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from barrierflow.barriers.offsets import SourceOffset


@dataclass(frozen=True)
class PlanRequest:
    start: SourceOffset
    available: Mapping[str, int]
    max_records_per_partition: int | None = None
    requested_barrier: int = 0
    #: When the requested checkpoint was triggered (Unix epoch, ms; None: not known).
    barrier_triggered_ms: int | None = None
    hold: bool = False
    paused_partitions: frozenset[str] = field(default_factory=frozenset)
    replay_end: Mapping[str, int] | None = None
    partition_caps: Mapping[str, int] = field(default_factory=dict)
    barriers_only: bool = False


@dataclass(frozen=True)
class BatchPlan:
    end: SourceOffset
    injects_barrier: bool


#: From this many partitions on, the advance is computed on int64 arrays (numpy): converting
#: 10,000 offsets costs less than 10,000 steps of Python arithmetic. Below it, plain Python.
VECTOR_MIN_PARTITIONS = 512
#: Offsets and caps at or above this stay in plain Python (``begin + cap`` cannot overflow int64).
_VECTOR_LIMIT = 2**62


def plan_batch(request: PlanRequest) -> BatchPlan:
    """Plan the next batch's end offsets and barrier; see the module docstring.

    Linear in the number of partitions; the end offsets are in the start offset's order (sorted
    when a new partition appears). ``bench --scenario scale`` times it at 10,000 partitions:
    from :data:`VECTOR_MIN_PARTITIONS` on, the per-partition arithmetic runs on int64 arrays, and
    the result is a copy of the start mapping updated in place (a copied dict is presized, where a
    dict comprehension of 10,000 entries resizes itself as it grows)."""
    start = request.start.partitions
    if request.hold:
        return BatchPlan(request.start, injects_barrier=False)
    if request.barriers_only:
        return _with_barrier(request, dict(start))
    if request.replay_end is not None:
        replay = request.replay_end
        names = sorted(start.keys() | replay.keys())
        return _with_barrier(request, {p: max(start.get(p, 0), replay.get(p, 0)) for p in names})
    available = request.available
    cap = request.max_records_per_partition
    ends = _advance_vectorized(start, available, cap) if len(start) >= VECTOR_MIN_PARTITIONS else None
    if ends is None:
        if not available.keys() <= start.keys():  # a new partition appeared: start it at 0
            start = {p: start.get(p, 0) for p in sorted(start.keys() | available.keys())}
        ends = _advance(start, available, cap)
    end = dict(start)
    end.update(zip(start, ends, strict=True))
    for partition in request.paused_partitions & end.keys():
        end[partition] = start[partition]
    for partition, ceiling in request.partition_caps.items():
        if partition in end:
            end[partition] = max(start[partition], min(end[partition], ceiling))
    return _with_barrier(request, end)


def _advance(start: Mapping[str, int], available: Mapping[str, int], cap: int | None) -> list[int]:
    """Each started partition's end, in ``start``'s order: never backwards, at most ``cap``
    records, at most what is available (a partition ``available`` does not name stays)."""
    if cap is None:
        return [a if (a := available.get(p, b)) > b else b for p, b in start.items()]
    return [b if (a := available.get(p, b)) <= b else (b + cap if a - b > cap else a) for p, b in start.items()]


def _advance_vectorized(start: Mapping[str, int], available: Mapping[str, int], cap: int | None) -> list[int] | None:
    """:func:`_advance` on int64 arrays; None when plain Python must do it instead: a partition
    of ``available`` is not in ``start`` (new partitions are ordered first), or an offset or the
    cap is too large for int64 arithmetic."""
    import numpy as np

    count = len(start)
    missing = np.iinfo(np.int64).min  # what a partition that available does not name reads as
    try:
        begins = np.fromiter(start.values(), np.int64, count)
        if list(available) == list(start):  # the same partitions in the same order: no lookups
            reach = np.fromiter(available.values(), np.int64, count)
        else:
            reach = np.fromiter(map(available.get, start, itertools.repeat(missing)), np.int64, count)
            if count - int(np.count_nonzero(reach == missing)) != len(available):
                return None
    except OverflowError:
        return None
    if count and int(begins.max()) >= _VECTOR_LIMIT:
        return None
    if cap is not None:
        if not 0 <= cap < _VECTOR_LIMIT:
            return None
        reach = np.minimum(reach, begins + cap)
    ends: list[int] = np.maximum(reach, begins).tolist()
    return ends


def _with_barrier(request: PlanRequest, end: dict[str, int]) -> BatchPlan:
    start = request.start
    inject = request.requested_barrier > start.barrier
    barrier = request.requested_barrier if inject else start.barrier
    planned = SourceOffset(end, barrier, dict(start.extra), start.attempt)
    if inject:
        planned = planned.with_barrier(barrier, request.barrier_triggered_ms)
    return BatchPlan(planned, injects_barrier=inject)

