"""The batch planner: the one place that decides how far each partition advances.

Pure and deterministic: :func:`plan_batch` maps a :class:`PlanRequest` to a
:class:`BatchPlan` and touches nothing else. Sources call it from ``latestOffset``.

Rules, in order:

1. **Hold** (the synchronous-snapshot baseline, or an operator pause): every partition stays
   where it is and no barrier is injected; Spark then plans no batch.
2. **Advance**: each partition moves to ``min(available, start + max_records_per_partition)``
   and never backwards; paused partitions (watermark alignment) stay put.
   During a replay of committed epochs after a restore (``replay_end`` given; see
   :mod:`barrierflow.barriers.replay_plan`) the batch ends exactly at the recorded end offsets
   instead, whatever is available and whatever the batch size limit.
3. **Barrier**: if a checkpoint ``n`` newer than the last injected barrier is requested, this
   batch closes epoch ``n``: the plan carries ``barrier = n``. A batch is never planned
   across a barrier, because the barrier position *is* the batch's end offsets for every
   partition at once (all partitions are cut at the same batch boundary = aligned).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from barrierflow.barriers.offsets import SourceOffset


@dataclass(frozen=True)
class PlanRequest:
    start: SourceOffset
    available: Mapping[str, int]
    max_records_per_partition: int | None = None
    requested_barrier: int = 0
    hold: bool = False
    paused_partitions: frozenset[str] = field(default_factory=frozenset)
    replay_end: Mapping[str, int] | None = None


@dataclass(frozen=True)
class BatchPlan:
    end: SourceOffset
    injects_barrier: bool


def plan_batch(request: PlanRequest) -> BatchPlan:
    """Plan the next batch's end offsets and barrier; see the module docstring."""
    start = request.start
    if request.hold:
        return BatchPlan(start, injects_barrier=False)
    end: dict[str, int] = {}
    if request.replay_end is not None:
        for partition in sorted(set(start.partitions) | set(request.replay_end)):
            end[partition] = max(start.partitions.get(partition, 0), request.replay_end.get(partition, 0))
        return _with_barrier(request, end)
    for partition in sorted(set(start.partitions) | set(request.available)):
        begin = start.partitions.get(partition, 0)
        if partition in request.paused_partitions:
            end[partition] = begin
            continue
        target = max(begin, request.available.get(partition, begin))
        if request.max_records_per_partition is not None:
            target = min(target, begin + request.max_records_per_partition)
        end[partition] = target
    return _with_barrier(request, end)


def _with_barrier(request: PlanRequest, end: dict[str, int]) -> BatchPlan:
    start = request.start
    inject = request.requested_barrier > start.barrier
    barrier = request.requested_barrier if inject else start.barrier
    return BatchPlan(SourceOffset(end, barrier, dict(start.extra), start.attempt), injects_barrier=inject)

