"""Records/s after the first batch: the one way every benchmark counts it.

Definition (bench/results/method.md)::

    records/s after the first batch = (R_last - R_first) / (T_last - T_first)

* ``T_first``: when the run's first completed micro-batch was seen committed; for a pipeline of
  several stages, the first batch of the **first** stage (the one that reads the source).
* ``R_first``: the records committed up to and including that batch (the records of the first
  batch: they are **not** counted, so the queries' start-up is left out on both sides).
* ``T_last``: when the last micro-batch of the run was seen committed; for several stages, the
  last batch of the **last** stage (the one that writes the sink).
* ``R_last``: the records committed up to and including that batch (every record of the run for
  a run that read its source to the end).

Both ends are batch ends, so nothing before the first batch's end (JVM, query and worker start,
the first batch itself) and nothing after the last batch's end (stopping the queries, the last
checkpoint's upload) is in the figure. A run with only one batch has no rate after its first
batch: :func:`rate_after_first_batch` returns NaN for it (printed as ``nan``/``n/a``), never a
figure counted another way.

The interleaved method (:mod:`bench.interleaved`) counts each segment the same way, the batch
that opens the segment taking the place of the first batch. Flink SQL, which has no batches, is
counted from two runs: a short run takes the first batch's place (:func:`bench.flink_compare.flink_rate`).

The arithmetic is pure (no Spark, no barrierflow: only :func:`records_through` reads a query's
offset log) so that it has a fast unit test
(tests/bench/test_rates.py); :class:`StageBatchClock` watches a multi-stage run's progress
reports for the two batch ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class BatchEnd:
    """A micro-batch seen committed: when (``at``, monotonic seconds) and the records committed
    up to and including it (``records``, counted from the run's start)."""

    at: float
    records: int


def rate_after_first_batch(first: BatchEnd, last: BatchEnd) -> float:
    """``(last.records - first.records) / (last.at - first.at)``, records/s (module docstring).

    Returns NaN when ``last`` is not after ``first`` (a run of a single batch).

    Raises:
        ValueError: ``last`` has fewer records than ``first`` (the ends are swapped or from two
            different runs).
    """
    if last.records < first.records:
        raise ValueError(f"the last batch's records ({last.records:,}) are fewer than the first batch's "
                         f"({first.records:,}): pass the first completed batch first and the last one second")
    seconds = last.at - first.at
    if seconds <= 0:
        return math.nan
    return (last.records - first.records) / seconds


class _JobResult(Protocol):
    records: int
    steady_records: int
    steady_seconds: float


def job_rate(result: _JobResult) -> float:
    """Records/s after the first batch of a single-stage run (``StreamingJob.run``'s result).

    The job records ``steady_records`` (records committed after its first batch) and
    ``steady_seconds`` (from its first batch's commit to its last batch's commit): exactly the
    two differences of the definition. NaN for a run of one batch.
    """
    first = BatchEnd(0.0, result.records - result.steady_records)
    return rate_after_first_batch(first, BatchEnd(result.steady_seconds, result.records))


class _StageProgress(Protocol):
    stage: str
    batch_id: int | None


class StageBatchClock:
    """The two batch ends of a multi-stage run, from its progress reports.

    Pass it (or call it from) ``StagedPipelineJob.run(progress=...)``: it notes the first batch of
    stage ``first_stage`` it sees (its id and when) and when the batch id of ``last_stage`` last
    changed. Reports come every ``progress_every`` seconds, so both ends are known to that
    resolution; the same resolution on both ends, as for a single stage (whose job polls its
    commit log).
    """

    def __init__(self, first_stage: str, last_stage: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.first_stage = first_stage
        self.last_stage = last_stage
        self.clock = clock
        self.first_batch: tuple[int, float] | None = None  # (batch id, seen at)
        self._last_batch: int | None = None
        self.last_batch_at: float | None = None

    def __call__(self, progress: Any) -> None:
        now = self.clock()
        stages: tuple[_StageProgress, ...] = progress.stages
        for stage in stages:
            if stage.batch_id is None:
                continue
            if stage.stage == self.first_stage and self.first_batch is None:
                self.first_batch = (stage.batch_id, now)
            if stage.stage == self.last_stage and stage.batch_id != self._last_batch:
                self._last_batch, self.last_batch_at = stage.batch_id, now

    def rate(self, first_batch_records: int, records: int) -> float:
        """Records/s after the first batch: ``records`` committed by the last stage's last batch,
        ``first_batch_records`` by the first stage's first batch (:attr:`first_batch`'s id). NaN
        when either end was never seen or the last end is not after the first."""
        if self.first_batch is None or self.last_batch_at is None:
            return math.nan
        return rate_after_first_batch(BatchEnd(self.first_batch[1], first_batch_records),
                                      BatchEnd(self.last_batch_at, records))


def records_through(spark_checkpoint: Any, batch_id: int) -> int:
    """Records a query's source(s) had offered up to and including micro-batch ``batch_id``: the
    sum of the partition offsets in Spark's offset log for that batch (a generator counts from 0,
    a fresh Kafka topic or channel starts at offset 0). Reads barrierflow's offset log."""
    from barrierflow.barriers.offsets import SourceOffset
    from barrierflow.spark.offset_log import read_offsets

    return sum(sum(SourceOffset.from_json(o).partitions.values())
               for o in read_offsets(spark_checkpoint, batch_id) if o)
