"""ABS overhead measured inside one query per round: the modes alternate in short segments.

Why: two separate runs of the very same job differ on this machine by more than ABS costs
(abs_overhead's A/A line read 0.95, 0.90 and 0.91 in three runs: bench/results/before-2026-11-27.md).
Each query's JVM settles at its own efficiency (about 250 k or about 228 k records per JVM
CPU-second, whatever the mode), so a ratio of two runs mixes the mode's cost with the luck of
the JVM. Here each round is one query whose checkpoint mode changes every ``segment`` seconds,
cycling through the modes in orders balanced for carry-over (:func:`balanced_orders`: each mode
in every position and after every other mode equally often, so neither drift inside the round
nor what a segment leaves to the next is charged to one mode more than another). Every mode then
runs on the same JVM, the same state and the same moment of the machine, and the two
no-checkpoint modes give the A/A noise of this method.

Contract of a segment (:class:`Interleaver`):

* It starts and ends at a committed micro-batch. Every batch belongs to exactly one segment,
  which counts its records, and a segment's time runs from commit to commit.
* A checkpointing segment stops triggering when its time is up and ends only at the first
  commit after its last checkpoint completed (asynchronous phase included). A checkpoint's whole
  cost, including a synchronous baseline's held planner, falls inside a segment of its own mode,
  never into the next.
* A mode is applied only between checkpoints (:meth:`CheckpointCoordinator.retune` refuses
  otherwise), and so is the throttled link's rate.

Bias, stated: a checkpointing segment that follows a no-checkpoint one also uploads the state
files written meanwhile (uploads are incremental by file), so its first checkpoint is larger than
in a steady run. Interleaving charges the checkpointing modes more, not less.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.errors import BarrierflowError
from barrierflow.runtime.job import StreamingJob
from barrierflow.spark import commit_log, offset_log

from bench.jvm import JvmUsage, settle
from bench.modes import BASELINE, BASELINE_AGAIN, Mode, Sample, mode_spec
from bench.rates import BatchEnd, rate_after_first_batch

if TYPE_CHECKING:
    from barrierflow.spec.models import StageSpec
    from pyspark.sql import SparkSession

    from bench.throttled_link import ThrottledLink


@dataclass
class Segment:
    """One stretch of the query under one mode, from a commit to a later commit."""

    mode: str
    cycle: int
    first_batch: int  # first batch committed inside the segment
    last_batch: int
    records: int
    seconds: float
    jvm_cpu_seconds: float
    gc_seconds: float
    driver_cpu_seconds: float  # this Python process: coordinator, hashing, uploads, the throttled link
    checkpoint_ids: list[int] = field(default_factory=list)  # checkpoints completed in the segment
    checkpoint_batches: list[int] = field(default_factory=list)  # their barrier batches
    sync_ms: list[float] = field(default_factory=list)
    async_ms: list[float] = field(default_factory=list)
    incremental_bytes: list[int] = field(default_factory=list)
    failed: int = 0

    @property
    def throughput(self) -> float:
        """Records/s from the batch that opens the segment to the one that closes it, counted as
        :mod:`bench.rates` counts records after the first batch (NaN for an empty segment)."""
        return rate_after_first_batch(BatchEnd(0.0, 0), BatchEnd(self.seconds, self.records))


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``range(n)`` balanced for carry-over (a Williams design): over all of them each
    index sits in every position equally often, and follows every other index equally often:
    once in the ``n`` orders of an even ``n``, twice in the ``2 n`` orders of an odd ``n``. What one
    segment leaves to the next (JIT, collections, page cache, the store) is then shared by every
    mode alike."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low if len(first) % 2 else high)
        if len(first) % 2:
            high -= 1
        else:
            low += 1
    orders = [[(x + shift) % n for x in first] for shift in range(n)]
    return orders + [list(reversed(o)) for o in orders] if n % 2 else orders


def segment_plan(modes: Sequence[Mode], cycles: int, start: int = 0) -> list[tuple[int, Mode]]:
    """(cycle, mode) of each segment: ``cycles`` passes through ``modes``, pass ``k`` in the order
    :func:`balanced_orders` lists at ``start + k`` (cyclically). Passing ``start`` = rounds so far
    times ``cycles`` continues the design from round to round."""
    if cycles < 1 or not modes:
        raise BarrierflowError(f"an interleaved round needs at least one cycle and one mode (got {cycles}, {modes})")
    orders = balanced_orders(len(modes))
    return [(cycle, modes[i]) for cycle in range(cycles) for i in orders[(start + cycle) % len(orders)]]


def _records_through(spark_checkpoint: Path, batch: int) -> int:
    return sum(sum(SourceOffset.from_json(o).partitions.values())
               for o in offset_log.read_offsets(spark_checkpoint, batch) if o)


@dataclass
class _Mark:
    batch: int
    records: int
    mono: float
    jvm: JvmUsage
    driver_cpu: float
    completed: int
    failed: int


class Interleaver:
    """The ``on_tick``/``until`` pair of one :meth:`StreamingJob.run` that steps through ``plan``
    (see the module docstring for a segment's contract). ``segments`` holds the finished ones."""

    def __init__(self, plan: list[tuple[int, Mode]], segment_seconds: float, spark: SparkSession,
                 link: ThrottledLink | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.segment_seconds = segment_seconds
        self.spark = spark
        self.link = link
        self.clock = clock
        self.segments: list[Segment] = []
        self._index = -1  # -1: waiting for the query's first commit
        self._start: _Mark | None = None
        self._closing = False
        self._last_batch: int | None = None

    @property
    def finished(self) -> bool:
        return self._index >= len(self.plan)

    def done(self, job: StreamingJob) -> bool:
        return self.finished

    def on_tick(self, job: StreamingJob) -> None:
        coordinator = job.coordinator
        assert coordinator is not None
        if self.finished:
            coordinator.trigger_limit = coordinator.completed_count + len(coordinator.pending)
            return
        if self._index < 0:
            coordinator.trigger_limit = coordinator.completed_count + len(coordinator.pending)
        committed = commit_log.latest_committed(job.layout.spark_checkpoint)
        new_commit = committed is not None and committed != self._last_batch
        if new_commit:
            self._last_batch = committed
        if self._index < 0:
            # The first batch carries the start-up (and fills the state): segments start after it.
            if new_commit and not coordinator.pending:
                self._begin(job, 0)
            return
        assert self._start is not None
        if not self._closing and self.clock() - self._start.mono >= self.segment_seconds:
            self._closing = True
            coordinator.trigger_limit = coordinator.completed_count + len(coordinator.pending)
        if self._closing and new_commit and not coordinator.pending:
            self._end(job)
            if self._index + 1 < len(self.plan):
                self._begin(job, self._index + 1)
            else:
                self._index = len(self.plan)

    def _mark(self, job: StreamingJob) -> _Mark:
        coordinator = job.coordinator
        assert coordinator is not None and self._last_batch is not None
        times = os.times()
        return _Mark(self._last_batch, _records_through(job.layout.spark_checkpoint, self._last_batch), self.clock(),
                     JvmUsage.now(self.spark), times.user + times.system, coordinator.completed_count,
                     len(coordinator.failed))

    def _begin(self, job: StreamingJob, index: int) -> None:
        coordinator = job.coordinator
        assert coordinator is not None
        _, mode = self.plan[index]
        if mode.interval is None:
            coordinator.trigger_limit = coordinator.completed_count
        else:
            coordinator.retune(interval=mode.interval, synchronous_upload=mode.synchronous)
            coordinator.trigger_limit = None
        if self.link is not None:
            self.link.set_rate(mode.bandwidth)
        self._index = index
        self._closing = False
        self._start = self._mark(job)

    def _end(self, job: StreamingJob) -> None:
        coordinator = job.coordinator
        assert coordinator is not None and self._start is not None
        end = self._mark(job)
        start = self._start
        cycle, mode = self.plan[self._index]
        new = end.completed - start.completed
        manifests = coordinator.completed[-new:] if new else []
        used = end.jvm.since(start.jvm)
        self.segments.append(Segment(
            mode=mode.name, cycle=cycle, first_batch=start.batch + 1, last_batch=end.batch,
            records=end.records - start.records, seconds=end.mono - start.mono,
            jvm_cpu_seconds=used.cpu_seconds, gc_seconds=used.gc_seconds,
            driver_cpu_seconds=end.driver_cpu - start.driver_cpu,
            checkpoint_ids=[m.checkpoint_id for m in manifests],
            checkpoint_batches=[m.spark_batch_id for m in manifests],
            sync_ms=[m.sync_ms for m in manifests], async_ms=[m.async_ms for m in manifests],
            incremental_bytes=[m.incremental_bytes for m in manifests], failed=end.failed - start.failed,
        ))


def interleave(job: StreamingJob, plan: list[tuple[int, Mode]], segment_seconds: float,
               link: ThrottledLink | None = None) -> list[Segment]:
    """Run ``job`` through ``plan`` (one query) and return its segments. ``job``'s spec must not
    trigger checkpoints on its own before the first segment (a long interval, as
    :func:`~bench.abs_overhead.mode_spec` gives the no-checkpoint mode). Raises
    :class:`BarrierflowError` if the plan did not finish within a generous bound (four times its
    planned time plus the checkpoint timeout)."""
    interleaver = Interleaver(plan, segment_seconds, job.spark, link)
    bound = 4 * segment_seconds * len(plan) + job.spec.checkpoint.timeout
    job.run(duration=bound, on_tick=interleaver.on_tick, until=interleaver.done)
    if not interleaver.finished:
        raise BarrierflowError(f"the interleaved round of pipeline {job.spec.name} did not finish within "
                               f"{bound:.0f} s: {len(interleaver.segments)} of {len(plan)} segments done; "
                               "a checkpoint may be stuck (see the job's log)")
    return interleaver.segments


def cycle_ratios(segments: list[Segment], mode: str, baselines: tuple[str, ...]) -> list[float]:
    """Per cycle: ``mode``'s segment throughput over the mean throughput of that cycle's
    ``baselines`` segments (the spread of the single-segment ratios, printed beside each round)."""
    ratios = []
    for cycle in sorted({s.cycle for s in segments}):
        base = [s.throughput for s in segments if s.cycle == cycle and s.mode in baselines]
        mine = [s.throughput for s in segments if s.cycle == cycle and s.mode == mode]
        if base and mine and statistics.mean(base) > 0:
            ratios += [m / statistics.mean(base) for m in mine]
    return ratios


def fold_round(segments: list[Segment], modes: Sequence[Mode], samples: dict[str, Sample]) -> list[str]:
    """Add one round's figures to ``samples``, per mode: throughput (records over seconds of the
    mode's segments), checkpoints, JVM GC seconds, records per JVM CPU-second, and each
    checkpoint's phases and bytes. Returns one line per mode for the log (with the spread of the
    per-cycle ratios)."""
    lines = []
    for mode in modes:
        mine = [s for s in segments if s.mode == mode.name]
        records, secs = sum(s.records for s in mine), sum(s.seconds for s in mine)
        cpu = sum(s.jvm_cpu_seconds for s in mine)
        sample = samples[mode.name]
        sample.throughput.append(records / secs if secs else 0.0)
        sample.checkpoints.append(sum(len(s.checkpoint_ids) for s in mine))
        sample.gc_seconds.append(sum(s.gc_seconds for s in mine))
        sample.records_per_cpu_second.append(records / cpu if cpu else 0.0)
        for s in mine:
            sample.sync_ms += s.sync_ms
            sample.async_ms += s.async_ms
            sample.incremental_bytes += s.incremental_bytes
        per_cycle = cycle_ratios(segments, mode.name, (BASELINE.name, BASELINE_AGAIN.name)) or [0.0]
        lines.append(f"{mode.name:28} {sample.throughput[-1]:>12,.0f} rec/s over {len(mine)} segments ({secs:.0f} s; "
                     f"per-cycle ratio to no checkpoints {min(per_cycle):.2f}-{max(per_cycle):.2f})  "
                     f"{sample.checkpoints[-1]} checkpoints, {sum(s.failed for s in mine)} failed  JVM {cpu:.1f} "
                     f"CPU-s, this process {sum(s.driver_cpu_seconds for s in mine):.1f} CPU-s, "
                     f"{sample.records_per_cpu_second[-1]:,.0f} records per JVM CPU-s")
    return lines


def run_interleaved_rounds(base: StageSpec, modes: tuple[Mode, ...], samples: dict[str, Sample], root: Path,
                           spark: SparkSession, *, seconds: float, rounds: int, store: str | None,
                           link: ThrottledLink | None, segment: float) -> list[Segment]:
    """``rounds`` queries, each running every mode for about ``seconds`` in segments of
    ``segment`` seconds; fills ``samples`` per round and mode (records over seconds of the mode's
    segments; JVM GC seconds and records per JVM CPU-second of those segments) and returns every
    segment."""
    cycles = max(1, round(seconds / segment))
    every: list[Segment] = []
    for r in range(rounds):
        work = root / f"r{r}-interleaved"
        job = StreamingJob(mode_spec(base, BASELINE, work, store), spark=spark)
        settle(spark)
        segments = interleave(job, segment_plan(modes, cycles, start=r * cycles), segment, link)
        every += segments
        shutil.rmtree(work, ignore_errors=True)
        for s in segments:
            print(f"round {r + 1} cycle {s.cycle + 1} {s.mode:28} batches {s.first_batch}-{s.last_batch} "
                  f"{s.throughput:>12,.0f} rec/s ({s.seconds:.1f} s)  {len(s.checkpoint_ids)} checkpoints  "
                  f"JVM {s.jvm_cpu_seconds:.1f} CPU-s, GC {s.gc_seconds:.1f} s", file=sys.stderr)
        for line in fold_round(segments, modes, samples):
            print(f"round {r + 1} {line}", file=sys.stderr)
    return every
