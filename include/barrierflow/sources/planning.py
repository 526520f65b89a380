"""What a barrier-aware source does in ``latestOffset`` around the pure batch planner.

:class:`SourcePlanner` combines, per batch: the partitions' watermarks at the batch start
(given by the source: the generator computes them exactly from its record model), the
watermark-alignment and idleness component (:mod:`barrierflow.barriers.alignment`, the paused
set), adaptive batch sizing (:mod:`barrierflow.flow_control.batch_sizing`, the per-partition cap),
the pure planner (:func:`barrierflow.barriers.planner.plan_batch`) and the bounded per-batch
history in the work dir (:mod:`barrierflow.flow_control.watermark_history`).

The job passes the settings as the source option ``planning`` (:class:`PlanningOptions` as
JSON). Without event time, alignment and sizing the planner behaves exactly as before and no
history is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from barrierflow.barriers.control import ControlChannel, replay_end
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch
from barrierflow.flow_control.batch_sizing import BatchSizer
from barrierflow.flow_control.watermark_alignment import AlignmentDecision, AlignmentSettings, WatermarkAligner
from barrierflow.flow_control.watermark_history import BatchRecord, WatermarkHistory

if TYPE_CHECKING:  # the planner's Python worker never loads the whole spec
    from barrierflow.spec.models import StageSpec

#: The reader option of a source kind that ``replays_input`` (:mod:`barrierflow.sources.registry`):
#: a source offset (its JSON) that every ``latestOffset`` returns, so a query over a fresh
#: checkpoint reads, in one batch, every record from the first the pipeline read to that offset,
#: and then nothing more.
REPLAY_UNTIL = "replay_until"
#: With :data:`REPLAY_UNTIL`, the reader option of a source kind whose input a broker retains
#: (:attr:`~barrierflow.sources.registry.SourceKind.retained_input`: Kafka): a source offset (its
#: JSON) the replay's query starts at instead of the spec's ``starting_offsets``, so it reads the
#: records ``[from, until)`` in one batch (a bounded replay).
REPLAY_FROM = "replay_from"
#: partition -> start offset  ->  partition -> the partition's event-time position there (the
#: generator: its next record's event time, exact and never below the newest one read)
EventTimesAt = Callable[[Mapping[str, int]], Mapping[str, datetime | None]]
#: (partition, event time) -> end offset (exclusive) of the records at or before that time
OffsetAt = Callable[[str, datetime], int]


@dataclass(frozen=True)
class RowMeasure:
    """How a source whose records hold several rows each (a channel's row batches) is
    planned in rows: ``advance(partition, start, rows)`` is the end offset of the range from
    ``start`` holding at most ``rows`` rows (at least one record), ``rows(partition, start,
    end)`` the rows of a planned range. Without it a record is a row and offsets count."""

    advance: Callable[[str, int, int], int]
    rows: Callable[[str, int, int], int]


@dataclass(frozen=True)
class PlanningOptions:
    """Seconds; None = off. ``watermark_delay`` None: the pipeline has no event time."""

    watermark_delay: float | None = None
    idle_timeout: float | None = None
    max_drift: float | None = None
    update_interval: float = 0.0
    group: str = "default"
    target_batch_duration: float | None = None

    @classmethod
    def from_spec(cls, spec: StageSpec) -> PlanningOptions:
        """The settings of ``event_time`` and ``trigger.target_batch_duration``."""
        event_time = spec.event_time
        alignment = event_time.alignment if event_time else None
        return cls(
            watermark_delay=event_time.watermark_delay if event_time else None,
            idle_timeout=event_time.idle_timeout if event_time else None,
            max_drift=alignment.max_drift if alignment else None,
            update_interval=alignment.update_interval if alignment else 0.0,
            group=alignment.group if alignment else "default",
            target_batch_duration=spec.trigger.target_batch_duration,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> PlanningOptions:
        return cls(**json.loads(text)) if text else cls()

    @property
    def tracks_watermarks(self) -> bool:
        return self.watermark_delay is not None


class SourcePlanner:
    """One per source reader (lives in the reader's driver-side Python process)."""

    def __init__(self, options: PlanningOptions, control: ControlChannel,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.control = control
        self.clock = clock
        self.aligner = (WatermarkAligner(AlignmentSettings(options.max_drift, options.update_interval,
                                                           options.idle_timeout))
                        if options.tracks_watermarks else None)
        self.sizer: BatchSizer | None = None
        self.history = WatermarkHistory(control.directory) if options.tracks_watermarks else None
        self._last_planned: tuple[float, int] | None = None

    def plan(self, begin: SourceOffset, available: Mapping[str, int], max_records_per_partition: int,
             event_times_at: EventTimesAt, offset_at: OffsetAt | None = None,
             amend: Callable[[SourceOffset], SourceOffset] | None = None,
             measure: RowMeasure | None = None, offered: Mapping[str, int] | None = None) -> SourceOffset:
        """The next batch's end (see the module docstring). With ``offset_at`` every partition
        is also capped at its alignment ceiling (no record newer than the ceiling plus the delay).
        With ``measure`` the per-partition cap and the measured batch size are in rows.
        ``amend`` (a source that cuts the batch further, e.g. at barrier records in a channel)
        turns the planned end into the batch's real end, which is what is measured and recorded
        in the watermark history. ``offered``: where each partition's log ends, when
        ``available`` is less (how far the source lets each partition go in this batch, e.g.
        a slow consumer's rate); idleness looks at it, so a partition held back with records
        left to read is never idle."""
        now = self.clock()
        cap = self._size(now, begin, available, max_records_per_partition)
        decision = self._align(now, begin, available, cap, event_times_at, offset_at is not None, offered)
        caps: dict[str, int] = {}
        if decision is not None and decision.ceiling is not None and offset_at is not None:
            newest = decision.ceiling + timedelta(seconds=self.options.watermark_delay or 0.0)
            caps = {p: offset_at(p, newest) for p in available if p not in decision.idle}
        if measure is not None:
            for partition in available:
                bound = measure.advance(partition, begin.partitions.get(partition, 0), cap)
                caps[partition] = min(caps.get(partition, bound), bound)
        request = self.control.barrier_request()
        plan = plan_batch(PlanRequest(
            start=begin,
            available=available,
            max_records_per_partition=cap if measure is None else None,
            requested_barrier=request.checkpoint_id,
            barrier_triggered_ms=request.triggered_ms,
            hold=self.control.is_held(),
            barriers_only=self.control.barriers_only(),
            paused_partitions=decision.paused if decision else frozenset(),
            replay_end=replay_end(self.control, begin),
            partition_caps=caps,
        ))
        end = amend(plan.end) if amend is not None else plan.end
        if end.partitions != begin.partitions or end.barrier != begin.barrier:
            if measure is None:
                records = sum(end.partitions.get(p, 0) - begin.partitions.get(p, 0) for p in end.partitions)
            else:
                records = sum(measure.rows(p, begin.partitions.get(p, 0), end.partitions.get(p, 0))
                              for p in end.partitions)
            self._last_planned = (now, records)
            if self.history is not None and decision is not None:
                self.history.append(BatchRecord(
                    planned_at=datetime.now(UTC), start=dict(begin.partitions), end=dict(end.partitions),
                    barrier=end.barrier,
                    watermarks={p: a.watermark for p, a in decision.partitions.items()},
                    idle=sorted(decision.idle), paused=sorted(decision.paused),
                    pauses={p: a.pauses for p, a in decision.partitions.items()},
                    paused_seconds={p: a.paused_seconds for p, a in decision.partitions.items()},
                    cap=cap if self.sizer is not None else None))
        return end

    def _align(self, now: float, begin: SourceOffset, available: Mapping[str, int], cap: int,
               event_times_at: EventTimesAt, with_reach: bool,
               offered: Mapping[str, int] | None = None) -> AlignmentDecision | None:
        if self.aligner is None or self.options.watermark_delay is None:
            return None
        delay = timedelta(seconds=self.options.watermark_delay)

        def watermarks_at(offsets: Mapping[str, int]) -> dict[str, datetime | None]:
            return {p: (t - delay if t is not None else None) for p, t in event_times_at(offsets).items()}

        reach = None
        if with_reach and self.options.max_drift is not None:
            uncapped = {p: max(o, min(available.get(p, o), o + cap)) for p, o in begin.partitions.items()}
            reach = watermarks_at(uncapped)
        return self.aligner.decide(now, begin.partitions, offered if offered is not None else available,
                                   watermarks_at(begin.partitions), reach)

    def _size(self, now: float, begin: SourceOffset, available: Mapping[str, int], maximum: int) -> int:
        target = self.options.target_batch_duration
        if target is None:
            return maximum
        if self.sizer is None or self.sizer.maximum != maximum:
            self.sizer = BatchSizer(target, maximum)
        if self._last_planned is not None:
            planned_at, records = self._last_planned
            self.sizer.measured(records, now - planned_at)
            self._last_planned = None
        with_data = sum(1 for p, o in available.items() if o > begin.partitions.get(p, 0))
        return self.sizer.cap(with_data)
