"""The built-in deterministic generator source (``format("barrierflow_generator")``).

Record ``i`` of partition ``p`` is a pure function of ``(p, i)`` and the spec, so any offset
range re-reads to identical rows (exact replays, exact expected outputs in tests):

* ``key   = (i * partitions + p) % keys``
* ``value = ((i * partitions + p) * 2654435761) % 1000``
* ``event_time = event_time_start + event_time_skew_ms[p] + i * step[p]`` with
  ``step[p] = event_time_step_ms`` when set, else ``1 / (rows_per_second * factor[p])``
  (1 ms per record when ``rows_per_second`` is 0, i.e. unthrottled)
* with ``malformed_every = k``, records with ``(i + 1) % k == 0`` are malformed: they go to
  the dead-letter output, not downstream.

Availability: partition ``p`` has ``rows_per_second * factor[p]`` new records per wall-clock
second since the reader started (unthrottled when 0), none during its ``silent_periods``; the
batch planner caps each batch at ``max_records_per_batch`` per partition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.sources.planning import REPLAY_UNTIL, PlanningOptions, SourcePlanner
from barrierflow.spec.generator_params import GeneratorParams

if TYPE_CHECKING:
    from barrierflow.spec.sources import GeneratorSourceSpec

SCHEMA = "partition INT, offset BIGINT, key BIGINT, value BIGINT, event_time TIMESTAMP"
_CHUNK = 65_536


@dataclass(frozen=True)
class GeneratorModel:
    """The generator's record function, shared by the reader and by tests/benchmarks: of the
    spec model on the driver, of :class:`~barrierflow.spec.generator_params.GeneratorParams`
    (the same fields, without the spec models' import) in Spark's workers."""

    spec: GeneratorSourceSpec | GeneratorParams

    def rate(self, p: int) -> float:
        factors = self.spec.partition_rate_factors
        return self.spec.rows_per_second * (factors[p] if p < len(factors) else 1.0)

    def skew_us(self, p: int) -> int:
        skews = self.spec.event_time_skew_ms
        return (skews[p] if p < len(skews) else 0) * 1000

    def start_us(self) -> int:
        start = datetime.fromisoformat(self.spec.event_time_start)
        if start.tzinfo is None:
            raise ValueError("event_time_start needs a timezone, e.g. 2026-01-01T00:00:00+00:00")
        return int(start.timestamp() * 1_000_000)

    def step_us(self, p: int) -> float:
        """Event-time distance between consecutive records of partition ``p`` (microseconds)."""
        if self.spec.event_time_step_ms is not None:
            return self.spec.event_time_step_ms * 1000.0
        rate = self.rate(p)
        return (1_000_000.0 / rate) if rate > 0 else 1000.0

    def offset_at(self, p: int, moment: datetime) -> int:
        """End offset (exclusive) of the records of ``p`` with event time at or before ``moment``."""
        base = self.start_us() + self.skew_us(p)
        delta = (moment - _from_us(0)) // timedelta(microseconds=1) - base
        if delta < 0:
            return 0
        i = int(delta // self.step_us(p))
        while int((i + 1) * self.step_us(p)) <= delta:  # float rounding of event_time_us
            i += 1
        while i > 0 and int(i * self.step_us(p)) > delta:
            i -= 1
        return i + 1

    def event_time_us(self, p: int, i: Any) -> Any:
        step = self.step_us(p)
        base = self.start_us() + self.skew_us(p)
        if hasattr(i, "astype"):
            return base + (i * step).astype("int64")
        return base + int(i * step)

    def max_event_time(self, p: int, end: int) -> datetime | None:
        """Event time of the last record before offset ``end`` (None if the range is empty)."""
        if end <= 0:
            return None
        return _from_us(self.event_time_us(p, end - 1))

    def batches(self, p: int, start: int, end: int) -> Iterator[Any]:
        """Arrow record batches of the valid records in ``[start, end)`` of partition ``p``."""
        import numpy as np
        import pyarrow as pa

        parts = self.spec.partitions
        for lo in range(start, end, _CHUNK):
            hi = min(end, lo + _CHUNK)
            i = np.arange(lo, hi, dtype=np.int64)
            if self.spec.malformed_every:
                i = i[((i + 1) % self.spec.malformed_every) != 0]
                if len(i) == 0:
                    continue
            g = i * parts + p
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.full(len(i), p, dtype=np.int32)),
                    pa.array(i),
                    pa.array(g % self.spec.keys),
                    pa.array((g * 2654435761) % 1000),
                    pa.array(self.event_time_us(p, i), type=pa.timestamp("us", tz="UTC")),
                ],
                names=["partition", "offset", "key", "value", "event_time"],
            )

    def rows(self, p: int, start: int, end: int) -> list[tuple[int, int, int, int, datetime]]:
        """The valid records of ``[start, end)`` as Python tuples (tests, expected outputs)."""
        out = []
        for batch in self.batches(p, start, end):
            cols = batch.to_pydict()
            out += list(zip(cols["partition"], cols["offset"], cols["key"], cols["value"],
                            cols["event_time"], strict=True))
        return out

    def malformed(self, p: int, start: int, end: int) -> list[dict[str, Any]]:
        k = self.spec.malformed_every
        if not k:
            return []
        first = start + ((k - 1 - start) % k)
        return [
            {
                "source": self.spec.name,
                "partition": str(p),
                "offset": i,
                "payload": f'{{"key": {(i * self.spec.partitions + p) % self.spec.keys}, "value": ',
                "reason": f"malformed record (generator malformed_every={k}): truncated JSON payload",
            }
            for i in range(first, end, k)
        ]


def _from_us(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=int(us))


class GeneratorDataSource(DataSource):
    """Options: ``spec`` (GeneratorSourceSpec as JSON), ``control_dir``, ``dead_letter_uri``,
    ``planning`` (:class:`~barrierflow.sources.planning.PlanningOptions` as JSON, optional),
    ``replay_until`` (:data:`~barrierflow.sources.planning.REPLAY_UNTIL`, optional: a replay)."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_generator"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratorStreamReader(dict(self.options))


class GeneratorStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.spec = GeneratorParams.from_json(options["spec"])
        self.model = GeneratorModel(self.spec)
        self.control = ControlChannel(options["control_dir"])
        self.dead_letter_uri = options.get("dead_letter_uri", "")
        self._clock_origin: tuple[float, dict[str, int]] | None = None
        self.planner = SourcePlanner(PlanningOptions.from_json(options.get("planning")), self.control)
        until = options.get(REPLAY_UNTIL)
        self.until = SourceOffset.from_json(json.loads(until)) if until else None

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to the executors; the planner's bookkeeping stays on the driver.
        state = dict(self.__dict__)
        state["planner"] = None
        return state

    def initialOffset(self) -> dict:
        return SourceOffset({str(p): 0 for p in range(self.spec.partitions)}).to_json()

    def _available(self, start: SourceOffset) -> dict[str, int]:
        available = self._unbounded_available(start)
        limit = self.spec.records_per_partition
        return available if limit is None else {p: min(o, limit) for p, o in available.items()}

    def _unbounded_available(self, start: SourceOffset) -> dict[str, int]:
        if self.spec.rows_per_second <= 0:
            return {p: o + self.spec.max_records_per_batch for p, o in start.partitions.items()}
        now = time.monotonic()
        if self._clock_origin is None:
            self._clock_origin = (now, dict(start.partitions))
        origin_t, origin = self._clock_origin
        elapsed = now - origin_t
        return {
            str(p): origin.get(str(p), 0) + int((elapsed - self.spec.silent_seconds(p, elapsed)) * self.model.rate(p))
            for p in range(self.spec.partitions)
        }

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if self.until is not None:  # a replay (planning.REPLAY_UNTIL): one batch to the end, then nothing
            return self.until.to_json()
        begin = SourceOffset.from_json(start)
        end = self.planner.plan(begin, self._available(begin), self.spec.max_records_per_batch,
                                self._event_times_at, lambda p, t: self.model.offset_at(int(p), t))
        return end.to_json()

    def _event_times_at(self, offsets: Any) -> dict[str, datetime | None]:
        """Exact: each partition's next record's event time (the model is deterministic), so a
        partition that has read nothing yet already has its place in event time."""
        return {p: _from_us(self.model.event_time_us(int(p), o)) for p, o in offsets.items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        s, e = SourceOffset.from_json(start), SourceOffset.from_json(end)
        return [
            InputPartition((int(p), s.partitions.get(p, 0), e.partitions[p]))
            for p in sorted(e.partitions, key=int)
            if e.partitions[p] > s.partitions.get(p, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from barrierflow.spark.worker_heap import freeze_long_lived

        freeze_long_lived()
        p, start, end = partition.value
        if self.spec.malformed_every and self.dead_letter_uri:
            from barrierflow.sources.dead_letter import write_dead_letters

            write_dead_letters(self.dead_letter_uri, self.spec.name, str(p), start, end,
                               self.model.malformed(p, start, end))
        yield from self.model.batches(p, start, end)

    def commit(self, end: dict) -> None:
        """Nothing to release: the generator keeps no buffers."""


class GeneratorBatchDataSource(DataSource):
    """The generator's records as a *batch* source (``format("barrierflow_generator_batch")``),
    for recomputing a pipeline's output from its input (the stream-vs-batch comparison).

    Options: ``spec`` (GeneratorSourceSpec as JSON) and ``ranges`` (JSON ``{partition: [start,
    end]}``, offsets, end exclusive). Writes no dead letters: malformed records are skipped
    exactly as the stream skips them."""

    @classmethod
    def name(cls) -> str:
        return "barrierflow_generator_batch"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return GeneratorBatchReader(dict(self.options))


class GeneratorBatchReader(DataSourceReader):
    """One Spark partition per generator partition's offset range."""

    def __init__(self, options: dict[str, str]) -> None:
        self.model = GeneratorModel(GeneratorParams.from_json(options["spec"]))
        self.ranges = {int(p): (int(r[0]), int(r[1])) for p, r in json.loads(options["ranges"]).items()}

    def partitions(self) -> list[InputPartition]:
        return [InputPartition((p, start, end)) for p, (start, end) in sorted(self.ranges.items()) if end > start]

    def read(self, partition: InputPartition | None) -> Iterator[Any]:
        """The records of one partition's range. When every range is empty (:meth:`partitions`
        lists none), Spark still reads one partition without a value: it yields nothing."""
        from barrierflow.spark.worker_heap import freeze_long_lived

        if partition is None or partition.value is None:
            return
        freeze_long_lived()
        p, start, end = partition.value
        yield from self.model.batches(p, start, end)


def first_offset_at_or_after(model: GeneratorModel, p: int, event_time_us: int, limit: int | None) -> int:
    """The first offset of partition ``p`` whose event time is >= ``event_time_us`` (event time
    grows with the offset); ``limit`` (records per partition, None: unbounded) caps it."""
    hi = 1
    while model.event_time_us(p, hi) < event_time_us and (limit is None or hi < limit):
        hi *= 2
    if limit is not None:
        hi = min(hi, limit)
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if model.event_time_us(p, mid) < event_time_us:
            lo = mid + 1
        else:
            hi = mid
    return lo
