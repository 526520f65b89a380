"""A single-stage pipeline: the general run driver with one stage whose checkpoint is the cut.

:class:`StageCuts` is the cut keeper of one stage (:mod:`barrierflow.runtime.pipeline_runner`):
the stage's coordinator triggers the barriers and its sinks commit when the checkpoint
completes; the store keeps the single-stage layout (``<checkpoint.storage>/<pipeline>``). Its
restore at start (:meth:`StreamingJob.restore_if_needed`) restores the newest valid checkpoint
when there is no local Spark checkpoint, and its sinks first finish what a crashed run left in
doubt (:meth:`StreamingJob.recover_sinks`).

:class:`StreamingJob` opens one stage for the tests and benchmarks (``on_tick``/``until``
hooks, an injected SparkSession or checkpoint store) and runs it through the one run loop,
:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`. Contract of
:meth:`StreamingJob.run`: returns a :class:`RunResult` when the stop condition (duration or
number of completed checkpoints) is met and every sink commit of the run succeeded; raises
:class:`TolerableFailuresExceededError` after stopping the query when too many consecutive
checkpoints failed, :class:`JobFailedError` when the query itself died, and
:class:`~barrierflow.checkpointing.errors.SinkCommitFailedError` when a sink could not commit
(or abort) an epoch, also the run's last one, whose commit is queued by the tick that ends the
run and waited for once the query stopped. In every case the query is stopped, in-flight
uploads are given ``checkpoint.timeout`` to finish and the queued sink calls run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import Stage
from barrierflow.runtime.event_time import EventTimeStatus
from barrierflow.runtime.pipeline_runner import CutKeeper, PipelineRunner, RunResult, StageStats
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.runtime.startup import PhaseReport, StartupPhase
from barrierflow.sources.registry import StageRun, reached, source_kind
from barrierflow.spark import offset_log
from barrierflow.spec.models import StageSpec
from barrierflow.storage import ObjectStore
from barrierflow.transactions.committer import HeldCommits, SinkCommitter
from barrierflow.workdir.layout import JobLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from barrierflow.lease import FenceToken

__all__ = ["Progress", "RunResult", "StageCuts", "StreamingJob"]

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


class StageCuts(CutKeeper):
    """Who cuts a single-stage pipeline: the stage itself (module docstring)."""

    tick_seconds = TICK_SECONDS
    wait_started = False  # one query: nothing to stagger
    final_progress = False

    def __init__(self, job: StreamingJob) -> None:
        self.job = job
        self.name = job.spec.name
        self.spec_path = job.spec_path
        self.runners = [job.runner]
        self._attempt = 0

    @property
    def spark(self) -> SparkSession:
        return self.job.spark

    @property
    def work_dir(self) -> str:
        return str(self.job.layout.work_dir)

    @property
    def objects(self) -> ObjectStore:
        return self.job.store.objects

    @property
    def fence(self) -> FenceToken | None:
        return self.job.store.fence

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def lease(self) -> JobLease | None:
        return self.job.lease

    def hold(self, lease: JobLease | None) -> None:
        self.job.lease = lease
        self.job.store.fence = lease.token if lease is not None else None

    def is_source(self, runner: StageRunner) -> bool:
        return True

    def source_ends(self) -> dict[str, dict[str, int]]:
        return {self.name: self.job.source_end()}

    def prepare(self) -> None:
        job = self.job
        job.layout.work_dir.mkdir(parents=True, exist_ok=True)
        job.restore_if_needed(self.phases)
        if offset_log.planned_batches(job.layout.spark_checkpoint):  # restored, or left by the last run
            latest = job.store.latest()
            self.resumed_from = latest.checkpoint_id if latest is not None else None
        self._attempt = job.store.attempt()
        if job.store.fence is not None:
            job.store.fence.attempt = self._attempt

    def start(self, *, checkpoints: int | None) -> None:
        sinks = self.job.sink_committers(self._attempt)
        self.job.recover_sinks(sinks)
        coordinator = self.job.runner.start_coordinator(sinks=sinks, attempt=self._attempt,
                                                        spark_version=self.spark.version)
        coordinator.trigger_limit = checkpoints

    def stage_run(self, runner: StageRunner) -> StageRun:
        return StageRun(attempt=self._attempt)

    def queries_started(self) -> None:
        """Nothing: the stage's coordinator started before its query."""

    def tick(self) -> None:
        """Nothing beyond the stage's own tick: its coordinator is the cut coordinator."""

    @property
    def _coordinator(self) -> CheckpointCoordinator | None:
        return self.job.runner.coordinator

    @property
    def cutter(self) -> CheckpointCoordinator | None:
        """The stage's coordinator: it triggers the cuts."""
        return self._coordinator

    @property
    def completed(self) -> list[Manifest]:
        return self._coordinator.completed if self._coordinator is not None else []

    @property
    def completed_count(self) -> int:
        return self._coordinator.completed_count if self._coordinator is not None else 0

    @property
    def failed(self) -> list[FailureRecord]:
        return self._coordinator.failed if self._coordinator is not None else []

    def at_end(self, cut: Manifest, ends: dict[str, dict[str, int]]) -> bool:
        channel_state = cut.alignment.channel_state_records if cut.alignment is not None else 0
        return reached(cut.barrier_offsets.get(self.job.spec.source.name), ends[self.name]) and channel_state == 0

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> Progress:
        coordinator = self._coordinator
        assert coordinator is not None
        stage = stats[self.name]
        event_time = self.job.runner.event_time
        return Progress(stage.latest_batch, stage.records, stage.records / elapsed if elapsed else 0.0,
                        coordinator.current_epoch(),
                        coordinator.last_completed.checkpoint_id if coordinator.last_completed else None,
                        coordinator.uploads_in_flight, len(coordinator.failed),
                        event_time.status() if event_time is not None else None)


class StreamingJob:
    """One single-stage pipeline run through the one run driver (module docstring). ``spark``
    and ``checkpoint_objects`` can be injected (tests share one SparkSession; failure-injection
    tests wrap the checkpoint store). With ``hold_commits`` its sink pre-commits every epoch
    but commits none (:class:`~barrierflow.transactions.committer.HeldCommits`: an upgrade's
    canary)."""

    def __init__(
        self,
        spec: StageSpec,
        *,
        spec_path: str = "<spec>",
        spark: SparkSession | None = None,
        checkpoint_objects: ObjectStore | None = None,
        layout: JobLayout | None = None,
        hold_commits: bool = False,
    ) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.hold_commits = hold_commits
        self._spark = spark
        self.layout = layout or JobLayout.for_spec(spec)
        self.store = CheckpointStore.for_spec(spec, checkpoint_objects)
        #: The pipeline's one stage, run by :class:`~barrierflow.runtime.stage_runner.StageRunner`.
        self.runner = StageRunner(Stage(spec.name, spec, self.store, self.layout), label=f"pipeline {spec.name}")
        self.lease: JobLease | None = None
        self.event_time = self.runner.event_time
        #: The one run driver, with this stage as its cut keeper.
        self.driver = PipelineRunner(StageCuts(self))

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

            self._spark = build_session(self.spec.spark, app_name=f"barrierflow-{self.spec.name}",
                                        sources=self.spec.sources, work_dirs=[self.spec.work_dir or ""])
        return self._spark

    def sink_committers(self, attempt: int | None = None) -> list[SinkCommitter]:
        """The driver-side sink of the spec (a two-phase-commit sink, or none; its commits held
        with ``hold_commits``)."""
        from barrierflow.sinks.factory import build_sink

        sink = build_sink(self.spec, self.store, self.layout,
                          attempt=self.store.attempt() if attempt is None else attempt)
        return [HeldCommits(sink) if self.hold_commits else sink]

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
        true — whichever comes first; with none, until interrupted. With ``lease_check`` the
        job takes the pipeline's lease for the run (``barrierflow run`` takes it itself)."""
        self.layout.work_dir.mkdir(parents=True, exist_ok=True)
        lease = self.driver.lease()
        if lease_check:
            lease.acquire()
            self.driver.hold(lease)  # every manifest, write-ahead batch and sink decision checks it
        try:
            return self.driver.run(
                duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted, progress=progress,
                progress_every=progress_every, on_tick=(lambda: on_tick(self)) if on_tick is not None else None,
                until=(lambda: until(self)) if until is not None else None)
        finally:
            lease.release()
            self.driver.hold(None)

    def source_end(self) -> dict[str, int]:
        """The end of the spec's bounded source. Raises UserInputError for an unbounded one."""
        end = source_kind(self.spec.source).bounded_end(self.spec.source)
        if end is None:
            raise UserInputError("--until-exhausted needs a bounded source: a generator with records_per_partition, "
                                 "or a Kafka topic (read to its end offsets when the run starts)")
        return end

    def recover_sinks(self, sinks: list[SinkCommitter]) -> None:
        """Before starting: finish what a crashed run left in doubt. Pre-committed epochs
        that a completed checkpoint covers are committed; other unfinished ones are aborted
        and their write-ahead batches go into the next epoch (Spark resumes from its local
        checkpoint, so no write-ahead batch is discarded here)."""
        from barrierflow.transactions.two_phase import TwoPhaseCommitSink

        latest = self.store.latest()
        for sink in sinks:
            if isinstance(sink, TwoPhaseCommitSink):
                decisions = sink.plan(latest.checkpoint_id if latest else None, restoring=True)
                sink.apply(decisions)
                for d in decisions:
                    if d.action != "NONE":
                        log.warning("sink %s: %s %s (%s)", d.sink, d.action.lower(), d.transaction_id, d.reason)

    def restore_if_needed(self, phases: PhaseReport | None = None) -> None:
        """With no local Spark checkpoint, start from the newest checkpoint that passes
        structural verification (if there is any; the rule of
        :func:`barrierflow.verification.choice.choose_checkpoint` with ``latest-valid``), so
        that a job moved to a fresh machine continues exactly once; corrupt newer ones are
        skipped with a warning naming why. ``phases`` is told the ``choosing`` and
        ``restoring`` steps (:mod:`barrierflow.runtime.startup`) as they begin.

        Raises:
            CheckpointNotFoundError: checkpoints exist but none passes verification (starting
                from the beginning of the source would write committed output again).
        """
        from barrierflow.pipeline.model import stage_pipeline
        from barrierflow.recovery.restore import restore_pipeline
        from barrierflow.verification.choice import LATEST_VALID, choose_checkpoint
        from barrierflow.verification.runner import candidate_ids

        if offset_log.planned_batches(self.layout.spark_checkpoint):
            return
        candidates = candidate_ids(self.store)
        if not candidates:
            return
        if phases is not None:
            phases(StartupPhase("choosing", f"no local Spark checkpoint: choosing and verifying the checkpoint to "
                                            f"restore (newest of {len(candidates)})"))
        pipeline = stage_pipeline(self.spec, store=self.store, layout=self.layout, spec_path=self.spec_path)
        choice = choose_checkpoint(pipeline, LATEST_VALID)
        for checkpoint_id, why in choice.skipped:
            log.warning("not restoring checkpoint %d: %s", checkpoint_id, why)
        if phases is not None:
            files = self.store.get(choice.checkpoint_id).files
            size = sum(f.size for f in files)
            phases(StartupPhase("restoring", f"restoring checkpoint {choice.checkpoint_id}: {len(files)} files "
                                             f"({size / 1e6:.1f} MB)"))
        report = restore_pipeline(self.spec, checkpoint_id=choice.checkpoint_id, store=self.store,
                                  layout=self.layout, check_running=False)
        log.warning("no local Spark checkpoint: restored checkpoint %d (attempt %d)",
                    report.checkpoint_id, report.attempt)
