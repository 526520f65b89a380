"""Running a pipeline: build the Structured Streaming query, drive the checkpoint
coordinator next to it, stop on a condition, report.

Contract of :meth:`StreamingJob.run`: returns a :class:`RunResult` when the stop condition
(duration or number of completed checkpoints) is met and every sink commit of the run
succeeded; raises :class:`TolerableFailuresExceededError` after stopping the query when too
many consecutive checkpoints failed, :class:`JobFailedError` when the query itself died, and
:class:`~barrierflow.checkpointing.errors.SinkCommitFailedError` when a sink could not commit
(or abort) an epoch, also the run's last one, whose commit is queued by the tick that ends the
run and waited for once the query stopped. In every case the query is stopped, in-flight
uploads are given ``checkpoint.timeout`` to finish and the queued sink calls run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import Stage
from barrierflow.runtime.event_time import EventTimeStatus
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.sources.registry import StageRun, reached, source_kind
from barrierflow.spark import commit_log, offset_log
from barrierflow.spec.models import PipelineSpec
from barrierflow.storage import ObjectStore
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.workdir.layout import JobLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

TICK_SECONDS = 0.01


@dataclass(frozen=True)
class Progress:
    batch_id: int | None
    records: int
    records_per_second: float
    epoch: int
    last_completed: int | None
    uploads_in_flight: int
    failed: int
    #: with event_time: late rows, paused/idle partitions, watermark skew (None otherwise)
    event_time: EventTimeStatus | None = None


@dataclass
class RunResult:
    pipeline: str
    batches: int
    records: int
    elapsed_seconds: float
    steady_records: int = 0
    steady_seconds: float = 0.0
    completed: list[Manifest] = field(default_factory=list)  # the newest 100 (KEEP_COMPLETED) of the run
    failed: list[FailureRecord] = field(default_factory=list)
    dead_letters: int = 0

    @property
    def throughput(self) -> float:
        """Records per second after the first batch (excludes JVM and worker start-up)."""
        if self.steady_seconds > 0:
            return self.steady_records / self.steady_seconds
        return self.records / self.elapsed_seconds if self.elapsed_seconds else 0.0


def _total(offsets: list[dict[str, Any] | None]) -> int:
    return sum(sum(SourceOffset.from_json(o).partitions.values()) for o in offsets if o)


class StreamingJob:
    """One pipeline run. ``spark`` and ``checkpoint_objects`` can be injected (tests share
    one SparkSession; failure-injection tests wrap the checkpoint store)."""

    def __init__(
        self,
        spec: PipelineSpec,
        *,
        spec_path: str = "<spec>",
        spark: SparkSession | None = None,
        checkpoint_objects: ObjectStore | None = None,
        layout: JobLayout | None = None,
    ) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self._spark = spark
        self.layout = layout or JobLayout.for_spec(spec)
        self.store = CheckpointStore.for_spec(spec, checkpoint_objects)
        #: The pipeline's one stage, run by :class:`~barrierflow.runtime.stage_runner.StageRunner`.
        self.runner = StageRunner(Stage(spec.name, spec, self.store, self.layout), label=f"pipeline {spec.name}")
        self.lease: JobLease | None = None
        #: Whether this job checked that a cluster's executors see the work dir (once per job).
        self.work_dir_checked = False
        self.event_time = self.runner.event_time

    @property
    def query(self) -> StreamingQuery | None:
        """The running query (None before the run starts it)."""
        return self.runner.query

    @property
    def coordinator(self) -> CheckpointCoordinator | None:
        """The run's checkpoint coordinator (None before the run starts it)."""
        return self.runner.coordinator

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from barrierflow.runtime.session import build_session

            self._spark = build_session(self.spec.spark, app_name=f"barrierflow-{self.spec.name}")
        return self._spark

    # -- building -----------------------------------------------------------------------
    def sink_committers(self, attempt: int | None = None) -> list[SinkCommitter]:
        """The driver-side sink of the spec (a two-phase-commit sink, or none)."""
        from barrierflow.sinks.factory import build_sink

        return [build_sink(self.spec, self.store, self.layout,
                           attempt=self.store.attempt() if attempt is None else attempt)]

    def build_query(self) -> StreamingQuery:
        """Start the pipeline's query through its stage runner (the one query builder,
        :func:`barrierflow.runtime.stage_query.start_stage_query`)."""
        run = StageRun(attempt=self.store.attempt())
        query = self.runner.start_query(self.spark, spec_path=self.spec_path, run=run, fence=self.store.fence,
                                        check_work_dir=not self.work_dir_checked, wait=False)
        self.work_dir_checked = True
        return query

    # -- running ------------------------------------------------------------------------
    def run(
        self,
        *,
        duration: float | None = None,
        checkpoints: int | None = None,
        progress: Callable[[Progress], None] | None = None,
        progress_every: float = 1.0,
        on_tick: Callable[[StreamingJob], None] | None = None,
        until_exhausted: bool = False,
        lease_check: bool = True,
        until: Callable[[StreamingJob], bool] | None = None,
    ) -> RunResult:
        """Run until ``duration`` seconds passed, ``checkpoints`` completed, (with
        ``until_exhausted``, bounded sources only) two checkpoints completed with every
        partition at its end, or ``until`` (asked every tick, e.g. whether the last completed
        checkpoint reached offsets known to the caller: the end of an unbounded source) is
        true — whichever comes first; with none, until interrupted."""
        self.layout.work_dir.mkdir(parents=True, exist_ok=True)
        lease = JobLease(self.layout.work_dir, self.spec.name, store=self.store.objects)
        if lease_check:
            lease.acquire()
            self.store.fence = lease.token  # every manifest, staged batch and sink decision checks it
        self.lease = lease
        try:
            return self._run(duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                             progress=progress, progress_every=progress_every, on_tick=on_tick, until=until)
        finally:
            lease.release()
            self.store.fence = None

    def _run(
        self,
        *,
        duration: float | None,
        checkpoints: int | None,
        until_exhausted: bool,
        progress: Callable[[Progress], None] | None,
        progress_every: float,
        on_tick: Callable[[StreamingJob], None] | None,
        until: Callable[[StreamingJob], bool] | None = None,
    ) -> RunResult:
        self.restore_if_needed()
        attempt = self.store.attempt()
        if self.store.fence is not None:
            self.store.fence.attempt = attempt
        sinks = self.sink_committers(attempt)
        self.recover_sinks(sinks)
        end_offsets = self._source_end() if until_exhausted else None
        runner = self.runner
        coordinator = runner.start_coordinator(sinks=sinks, attempt=attempt, spark_version=self.spark.version)
        coordinator.trigger_limit = checkpoints
        start_batch = commit_log.latest_committed(self.layout.spark_checkpoint)
        runner.latest_batch = start_batch
        start_records = (_total(offset_log.read_offsets(self.layout.spark_checkpoint, start_batch))
                         if start_batch is not None else 0)
        started = time.monotonic()
        self.build_query()
        result = RunResult(self.spec.name, 0, 0, 0.0)
        last_progress = started
        first_batch_mono: float | None = None
        first_batch_records = 0
        last_commit_mono = started
        latest_batch = start_batch
        records = 0
        ended = False  # the loop reached a stop condition (no error is on its way out)
        try:
            while True:
                if self.lease is not None and self.lease.lost is not None:
                    self.lease.check("doing anything more")  # the heartbeat found the lease taken over
                if runner.tick():
                    latest_batch = runner.latest_batch
                    assert latest_batch is not None
                    committed_offsets = offset_log.read_offsets(self.layout.spark_checkpoint, latest_batch)
                    records = _total(committed_offsets) - start_records
                    last_commit_mono = time.monotonic()
                    if first_batch_mono is None:
                        first_batch_mono, first_batch_records = last_commit_mono, records
                if on_tick is not None:
                    on_tick(self)
                now = time.monotonic()
                if progress is not None and now - last_progress >= progress_every:
                    last_progress = now
                    elapsed = now - started
                    progress(Progress(latest_batch, records, records / elapsed if elapsed else 0.0,
                                      coordinator.current_epoch(),
                                      coordinator.last_completed.checkpoint_id if coordinator.last_completed else None,
                                      coordinator.uploads_in_flight, len(coordinator.failed),
                                      self.event_time.status() if self.event_time is not None else None))
                runner.check(self.store.fence)  # a fenced-off staging stopped the query: FencedOffError
                if checkpoints is not None and coordinator.completed_count >= checkpoints:
                    break
                if end_offsets is not None and sum(
                        1 for m in coordinator.completed
                        if reached(m.barrier_offsets.get(self.spec.source.name), end_offsets)) >= 2:
                    break
                if duration is not None and now - started >= duration:
                    break
                if until is not None and until(self):
                    break
                time.sleep(TICK_SECONDS)
            ended = True
        finally:
            # Raises the failure of a sink commit no tick reported (the last checkpoint's) unless
            # the loop is already raising another error.
            runner.stop(min(self.spec.checkpoint.timeout, 60.0), failing=not ended)
            stopped = time.monotonic()
            final = commit_log.latest_committed(self.layout.spark_checkpoint)
            if final is not None and final != start_batch:
                final_records = _total(offset_log.read_offsets(self.layout.spark_checkpoint, final)) - start_records
                if final_records != records:
                    records, last_commit_mono = final_records, stopped
                latest_batch = final
            result.batches = (latest_batch - start_batch if start_batch is not None else
                              (latest_batch + 1 if latest_batch is not None else 0))
            result.records = records
            result.elapsed_seconds = stopped - started
            if first_batch_mono is not None:
                result.steady_records = records - first_batch_records
                result.steady_seconds = last_commit_mono - first_batch_mono
            result.completed = list(coordinator.completed)
            result.failed = list(coordinator.failed)
        return result

    def _source_end(self) -> dict[str, int]:
        end = source_kind(self.spec.source).bounded_end(self.spec.source)
        if end is None:
            raise UserInputError("--until-exhausted needs a bounded source: a generator with records_per_partition, "
                                 "or a Kafka topic (read to its end offsets when the run starts)")
        return end

    def recover_sinks(self, sinks: list[SinkCommitter]) -> None:
        """Before starting: finish what a crashed run left in doubt. Pre-committed epochs
        that a completed checkpoint covers are committed; other unfinished ones are aborted
        and their staged batches go into the next epoch (Spark resumes from its local
        checkpoint, so nothing staged is discarded here)."""
        from barrierflow.transactions.two_phase import TwoPhaseCommitSink

        latest = self.store.latest()
        for sink in sinks:
            if isinstance(sink, TwoPhaseCommitSink):
                decisions = sink.plan(latest.checkpoint_id if latest else None, restoring=True)
                sink.apply(decisions)
                for d in decisions:
                    if d.action != "NONE":
                        log.warning("sink %s: %s %s (%s)", d.sink, d.action.lower(), d.transaction_id, d.reason)

    def restore_if_needed(self) -> None:
        """With no local Spark checkpoint, start from the newest checkpoint that passes
        structural verification (if there is any; the rule of
        :func:`barrierflow.verification.choice.choose_checkpoint` with ``latest-valid``), so
        that a job moved to a fresh machine continues exactly once; corrupt newer ones are
        skipped with a warning naming why.

        Raises:
            CheckpointNotFoundError: checkpoints exist but none passes verification (starting
                from the beginning of the source would write committed output again).
        """
        from barrierflow.pipeline.model import single_stage_pipeline
        from barrierflow.recovery.restore import restore_pipeline
        from barrierflow.verification.choice import LATEST_VALID, choose_checkpoint
        from barrierflow.verification.runner import candidate_ids

        if offset_log.planned_batches(self.layout.spark_checkpoint):
            return
        if not candidate_ids(self.store):
            return
        pipeline = single_stage_pipeline(self.spec, store=self.store, layout=self.layout, spec_path=self.spec_path)
        choice = choose_checkpoint(pipeline, LATEST_VALID)
        for checkpoint_id, why in choice.skipped:
            log.warning("not restoring checkpoint %d: %s", checkpoint_id, why)
        report = restore_pipeline(self.spec, checkpoint_id=choice.checkpoint_id, store=self.store,
                                  layout=self.layout, check_running=False)
        log.warning("no local Spark checkpoint: restored checkpoint %d (attempt %d)",
                    report.checkpoint_id, report.attempt)
