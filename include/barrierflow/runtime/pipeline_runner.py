"""The one run driver: a pipeline of any shape runs through :meth:`PipelineRunner.run`.

A run drives the stages of one :class:`~barrierflow.runtime.running.RunningPipeline` (its
session, stores, stage runners, lease and attempt) with one :class:`CutKeeper`, the part that
says who cuts (:mod:`barrierflow.runtime.cuts`), where one :class:`StageHost` says they run;
both are chosen once for the pipeline (:func:`barrierflow.runtime.run_driver.open_driver`). As
in Flink's ``SingleCheckpointBarrierHandler``, one stage is the general case with N = 1:

* one stage (:class:`~barrierflow.runtime.cuts.OwnCheckpoints`): a cut is the stage's own checkpoint;
  its coordinator triggers the barriers and its sinks commit when the checkpoint completes;
  the store keeps the single-stage layout;
* several stages (:class:`~barrierflow.runtime.cuts.GlobalCheckpoints`): a cut is a global
  checkpoint of the :class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator`;
  the stages' coordinators never trigger and their sinks commit when the global checkpoint
  completes;
* several stages, each in a process of its own (``run --processes``): the supervisor's pipeline
  coordinator cuts (:class:`~barrierflow.runtime.stage_processes.SupervisedCuts`, started once
  every stage process runs its query) and the stages run in
  :class:`~barrierflow.runtime.stage_processes.StageProcesses`;
* one stage of several in such a process (``run --stage``,
  :class:`~barrierflow.runtime.cuts.FollowedCuts`): the stage follows the supervisor's
  global checkpoints and stops when the supervisor asks.

Where the stages run (:class:`StageHost`): in this process (:class:`LocalStages`: each
stage's :class:`~barrierflow.runtime.stage_runner.StageRunner`, its query in this driver's
SparkSession), or one process per stage (``StageProcesses``: spawned and waited for until
ready, a stage process that exits fails the run, asked to stop at the end or killed).

:meth:`PipelineRunner.run`, step by step (mirrored by ``# Step N.`` in its body):

1. Restore at start, once (:meth:`~barrierflow.runtime.running.RunningPipeline.restore_at_start`): one stage without a
   local Spark checkpoint restores its newest valid checkpoint; several stages restore the
   latest global checkpoint (or the initial cut) as a new attempt whenever an earlier run left
   anything; a stage process loads the attempt its supervisor made.
2. Start every stage's coordinator and the keeper's (:meth:`CutKeeper.start`); the run's
   clock (``duration``, the result's elapsed seconds) starts; then every stage's query
   (:meth:`StageHost.start`; stage processes: spawned and waited for until each runs its
   query), then :meth:`CutKeeper.queries_started` (``run --processes``: the pipeline
   coordinator starts).
3. Each tick: the lease, every stage's tick (its committed batches and records), the keeper's
   tick, the retention of ``checkpoint.retained`` told how many cuts completed (a run of it
   starts on its own thread: :mod:`barrierflow.retention.run_retention`), the metrics,
   ``on_tick``, the progress report every ``progress_every`` seconds (the first one
   ``progress_every`` seconds after the clock started, or, with stage processes, after every
   stage runs), every stage alive (:meth:`StageHost.check`: its query, or its process).
4. The stop rule, whichever comes first: ``checkpoints`` cuts completed; with
   ``until_exhausted``, :data:`COVERING_CUTS` completed cuts have every source stage at its
   source's end (:meth:`CutKeeper.at_end`); ``duration`` seconds passed; ``until`` is true;
   a stop request (``barrierflow stop``, :mod:`barrierflow.runtime.stop_request`) is done.
   A run that holds the pipeline's lease reads its stop request every tick (at most every
   :data:`~barrierflow.runtime.stop_request.POLL_SECONDS`). Taken up, it stops the cut
   coordinator (:meth:`CutKeeper.cutter`) from triggering; with ``--savepoint`` it first
   triggers one more cut right away (:meth:`Cutter.trigger_now`), its barrier in a batch that
   reads no more input (:meth:`PipelineRunner.barriers_only`), and the request is done
   once that cut completed (its sinks commit it at step 5, whose failure fails the run);
   should that cut fail, the stop fails and the run goes on as before. Without a savepoint
   the request is done once no cut is pending (the latest completed one is where a next run
   starts). The stop's states: :mod:`barrierflow.runtime.stopping`.
5. The end, in every case (:meth:`StageHost.stop`): every stage's query stopped, then each
   stage drained (in-flight uploads, then its sinks' queued commits and aborts) and its writer
   closed; the first commit failure no tick reported (the run's last checkpoint's) is raised
   unless another error is already on its way out. Stage processes are asked to stop at the
   last completed cut and waited for (one that exits non-zero, e.g. a final stage whose last
   sink commit failed, fails the run), unless the run is failing; any still running is killed.
   Then the retention's thread is waited for and, after a normal end, the cuts completed since
   its last run are retained.
6. The result (:class:`RunResult`): the completed and failed cuts, each stage's batches,
   records and manifests (stage processes: each stage's manifests of the completed cuts).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.offsets import SourceOffset
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.keyed_state.figures import KeyFigures
from barrierflow.lease import FencedOffError, JobLease
from barrierflow.pipeline.layout import OWN_CHECKPOINTS, CutLayout
from barrierflow.pipeline.words import words
from barrierflow.runtime.freshness import Freshness
from barrierflow.runtime.progress import Progress, StageProgress
from barrierflow.runtime.startup import StartupPhase
from barrierflow.runtime.stop_request import StopRequest, StopWatch
from barrierflow.runtime.stopping import Cutter, StopFollower, Stopping
from barrierflow.spark import commit_log, offset_log

if TYPE_CHECKING:

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.metrics.feed import MetricsFeed, StageCheckpoints, StageCounts
    from barrierflow.retention.run_retention import RunRetention
    from barrierflow.runtime.running import RunningPipeline
    from barrierflow.runtime.stage_runner import StageRunner
    from barrierflow.runtime.startup import PhaseReport
    from barrierflow.sources.registry import StageRun
    from barrierflow.spec.metrics import MetricsSpec

log = logging.getLogger(__name__)

__all__ = ["COVERING_CUTS", "CutKeeper", "Cutter", "LocalStages", "PipelineRunner", "RunResult", "StageHost",
           "StageResult", "StageStats", "covered"]

#: How many completed cuts must have every source stage at its end before a run with
#: ``until_exhausted`` stops: output that waits for the watermark (event-time windows) is
#: emitted by the batch after the last records, so it is committed with the next epoch.
COVERING_CUTS = 2
#: How long the end of a run gives in-flight uploads at most (seconds; ``checkpoint.timeout`` if shorter).
DRAIN_SECONDS = 60.0


def covered(cuts: Sequence[Any], at_end: Callable[[Any], bool]) -> bool:
    """Whether :data:`COVERING_CUTS` of the completed ``cuts`` are ``at_end`` (the exhaustion rule)."""
    return sum(1 for cut in cuts if at_end(cut)) >= COVERING_CUTS


def records_at(offsets: list[dict[str, Any] | None]) -> int:
    """The records a Spark offset-log entry says were read: the sum of its partitions' offsets."""
    return sum(sum(SourceOffset.from_json(o).partitions.values()) for o in offsets if o)


@dataclass
class StageStats:
    """What the run loop counts for one stage: its committed batches and the records they read
    since the run started (from the stage's Spark offset log)."""

    start_batch: int | None = None
    start_records: int = 0
    latest_batch: int | None = None
    records: int = 0
    first_batch_mono: float | None = None
    first_batch_records: int = 0
    #: when the last batch that read records committed (a batch that read none, e.g. one that
    #: only carried a barrier after the input ran dry, does not move it: the steady rate ends
    #: with the last record)
    last_commit_mono: float = 0.0

    @property
    def batches(self) -> int:
        """Batches committed since the run started (all of them for a stage that had none before)."""
        if self.latest_batch is None:
            return 0
        return self.latest_batch - self.start_batch if self.start_batch is not None else self.latest_batch + 1

    @classmethod
    def at_start(cls, runner: StageRunner, now: float) -> StageStats:
        checkpoint = runner.layout.spark_checkpoint
        start = commit_log.latest_committed(checkpoint)
        runner.latest_batch = start
        return cls(start, records_at(offset_log.read_offsets(checkpoint, start)) if start is not None else 0,
                   start, last_commit_mono=now)

    def committed(self, runner: StageRunner) -> None:
        """Count the batch ``runner`` just saw committed."""
        self.latest_batch = runner.latest_batch
        assert self.latest_batch is not None
        records = records_at(offset_log.read_offsets(runner.layout.spark_checkpoint, self.latest_batch)) \
            - self.start_records
        if self.first_batch_mono is None or records != self.records:
            self.last_commit_mono = time.monotonic()
        self.records = records
        if self.first_batch_mono is None:
            self.first_batch_mono, self.first_batch_records = self.last_commit_mono, self.records

    def result(self, runner: StageRunner, stopped: float) -> StageResult:
        """The stage's part of the result, once its query stopped (a batch committed after the last
        tick is counted)."""
        final = commit_log.latest_committed(runner.layout.spark_checkpoint)
        records, last_commit, latest = self.records, self.last_commit_mono, self.latest_batch
        if final is not None and final != self.start_batch:
            final_records = records_at(offset_log.read_offsets(runner.layout.spark_checkpoint, final)) \
                - self.start_records
            if final_records != records:
                records, last_commit = final_records, stopped
            latest = final
        out = StageResult(
            batches=(latest - self.start_batch if self.start_batch is not None and latest is not None else
                     (latest + 1 if latest is not None else 0)),
            records=records)
        if self.first_batch_mono is not None:
            out.steady_records = records - self.first_batch_records
            out.steady_seconds = last_commit - self.first_batch_mono
        if runner.coordinator is not None:
            out.completed = list(runner.coordinator.completed)
            runner.collect_freshness(final=True)  # the run's last commits drained after the loop
            out.freshness = {sink: list(figures) for sink, figures in runner.freshness.figures.items()}
        out.keys = runner.key_figures()
        return out


@dataclass
class StageResult:
    """One stage's part of a run: batches committed and records read in the run, the same after
    the first batch (``steady_*``), and the stage checkpoints it completed (the newest 100)."""

    batches: int = 0
    records: int = 0
    steady_records: int = 0
    steady_seconds: float = 0.0
    #: each sink's freshness per checkpoint committed in the run (:mod:`barrierflow.runtime.freshness`)
    freshness: dict[str, list[Freshness]] = field(default_factory=dict)
    completed: list[Manifest] = field(default_factory=list)
    #: keys the stage's keyed functions started and expired in the run (None: it has none)
    keys: KeyFigures | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"batches": self.batches, "records": self.records, "steady_records": self.steady_records,
               "steady_seconds": round(self.steady_seconds, 3),
               "completed": [m.checkpoint_id for m in self.completed]}
        if self.keys is not None:
            out["keys"] = {"started": self.keys.started, "expired": self.keys.expired, "live": self.keys.live}
        return out


@dataclass
class RunResult:
    """What a run did, in every shape.

    Attributes:
        completed: the cuts completed in the run: one stage's checkpoint manifests (the newest
            100), or the global manifests of several stages.
        failed: the cuts that failed: ``FailureRecord`` or ``GlobalFailure``.
        stages: each stage's part, by name.
        source_stages: the stages reading a source (whose records :attr:`records` counts).
    """

    pipeline: str
    elapsed_seconds: float
    completed: list[Any] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)
    stages: dict[str, StageResult] = field(default_factory=dict)
    source_stages: tuple[str, ...] = ()
    dead_letters: int = 0
    #: The stop request that ended the run (None: it ended otherwise), and the cut it took as
    #: a savepoint (None: none asked).
    stopped_by: StopRequest | None = None
    savepoint: int | None = None

    def _sources(self) -> list[StageResult]:
        return [s for name, s in self.stages.items() if name in self.source_stages]

    @property
    def batches(self) -> int:
        """Batches the source stages committed in the run."""
        return sum(s.batches for s in self._sources())

    @property
    def records(self) -> int:
        """Records the source stages read in the run."""
        return sum(s.records for s in self._sources())

    @property
    def steady_records(self) -> int:
        return sum(s.steady_records for s in self._sources())

    @property
    def steady_seconds(self) -> float:
        return max((s.steady_seconds for s in self._sources()), default=0.0)

    @property
    def throughput(self) -> float:
        """Records per second after the first batch (excludes JVM and worker start-up)."""
        if self.steady_seconds > 0:
            return self.steady_records / self.steady_seconds
        return self.records / self.elapsed_seconds if self.elapsed_seconds else 0.0

    @property
    def freshness(self) -> dict[tuple[str, str], list[Freshness]]:
        """Each (stage, sink)'s freshness per checkpoint committed in the run, oldest first
        (sinks without a committed checkpoint of records left out)."""
        return {(stage, sink): figures for stage, result in self.stages.items()
                for sink, figures in result.freshness.items() if figures}

    @property
    def stage_manifests(self) -> dict[str, list[Manifest]]:
        """Each stage's checkpoint manifests completed in the run."""
        return {name: s.completed for name, s in self.stages.items()}

    def as_dict(self) -> dict[str, Any]:
        """One JSON document for every shape: the run's figures, its cuts and ``stages``."""
        return {"pipeline": self.pipeline, "elapsed_seconds": round(self.elapsed_seconds, 3),
                "batches": self.batches, "records": self.records, "throughput": round(self.throughput, 1),
                "completed": [c.checkpoint_id for c in self.completed],
                "failed": [f.checkpoint_id for f in self.failed],
                "stages": {name: s.as_dict() for name, s in self.stages.items()}}


class CutKeeper(ABC):
    """Who cuts a run's checkpoints: the one part of the run loop that depends on where the
    cuts come from (:mod:`barrierflow.runtime.cuts`), over ``pipeline``, the
    :class:`~barrierflow.runtime.running.RunningPipeline` that holds the run's session, stores,
    stage runners, lease and attempt, and does the restore at start. Seven members are abstract
    (:meth:`start`, :meth:`stage_run`, :meth:`tick`, :attr:`completed`, :attr:`failed`,
    :meth:`at_end`, :attr:`cutter`); the rest have defaults every shape shares."""

    #: Seconds between ticks of the run loop.
    tick_seconds: float = 0.02
    #: Whether a stage's query must initialise its source before the next stage's starts
    #: (stages do not start their Python workers all at once).
    wait_started: bool = True
    #: Whether progress is reported once more when the run reaches its limit.
    final_progress: bool = True
    #: Where the cuts are kept (what messages call a cut: :mod:`barrierflow.pipeline.words`).
    layout: CutLayout = OWN_CHECKPOINTS
    #: Whether this process follows another's cuts (a stage process): its restore at start only
    #: loads the attempt the supervisor made (:meth:`~barrierflow.runtime.running.RunningPipeline.restore_at_start`).
    follows_cuts: bool = False
    #: After the restore at start: the completed cut the run continues from (None: from the start).
    resumed_from: int | None = None

    def __init__(self, pipeline: RunningPipeline) -> None:
        self.pipeline = pipeline

    @property
    def name(self) -> str:
        return self.pipeline.name

    @property
    def spec_path(self) -> str:
        return self.pipeline.spec_path

    @property
    def runners(self) -> list[StageRunner]:
        """The stages this process runs (every stage of the pipeline unless said otherwise)."""
        return self.pipeline.stages

    def is_source(self, runner: StageRunner) -> bool:
        return self.pipeline.is_source(runner)

    def source_ends(self) -> dict[str, dict[str, int]]:
        """Each source stage's bounded source end. Raises UserInputError for an unbounded one."""
        return self.pipeline.source_ends()

    # -- what differs ---------------------------------------------------------------------
    @abstractmethod
    def start(self, *, checkpoints: int | None) -> None:
        """Step 2: start every stage's coordinator and the cut coordinator (at most
        ``checkpoints`` triggers; None: no limit)."""

    @abstractmethod
    def stage_run(self, runner: StageRunner) -> StageRun:
        """What ``runner``'s reader is told beyond its spec in this run."""

    @abstractmethod
    def tick(self) -> None:
        """The cut coordinator's tick, after every stage's."""

    @property
    @abstractmethod
    def completed(self) -> Sequence[Any]:
        """The cuts completed in this run, oldest first."""

    @property
    @abstractmethod
    def failed(self) -> Sequence[Any]:
        """The cuts that failed in this run."""

    @abstractmethod
    def at_end(self, cut: Any, ends: dict[str, dict[str, int]]) -> bool:
        """Whether ``cut`` has every source stage at its end (``ends``, by stage) and no channel
        state (records in flight at an unaligned snapshot are processed in the next epoch)."""

    @property
    @abstractmethod
    def cutter(self) -> Cutter | None:
        """The coordinator that triggers this run's cuts, once started (None: this process
        triggers none, e.g. a stage following its supervisor's cuts)."""

    # -- shared ---------------------------------------------------------------------------
    def queries_started(self) -> None:  # noqa: B027 -- a default, not a missing member
        """Every stage's query was started (a stage process reports that it is ready); by
        default nothing: the cut coordinator started before the queries."""

    @property
    def completed_count(self) -> int:
        """How many cuts completed in this run (:attr:`completed` may keep only the newest)."""
        return len(self.completed)

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> Progress:
        """What the progress display is given: the one :class:`~barrierflow.runtime.progress.Progress`."""
        return progress_of(self, tuple(stage_progress(r, stats.get(r.name), self.pipeline.last_completed)
                                       for r in self.runners), stats, elapsed)


def stage_progress(runner: StageRunner, stats: StageStats | None, last_completed: int) -> StageProgress:
    """``runner``'s part of the progress: Spark's last progress of its query, its coordinator's
    epoch (before it started: the cut after ``last_completed``) and what the loop counted."""
    last = runner.query.lastProgress if runner.query is not None else None
    epoch = runner.coordinator.current_epoch() if runner.coordinator is not None else last_completed + 1
    keys = runner.key_figures()
    return StageProgress(runner.name, int(last["batchId"]) if last else None,
                         float(last.get("processedRowsPerSecond") or 0.0) if last else 0.0, epoch,
                         records=stats.records if stats is not None else 0,
                         batches=stats.batches if stats is not None else 0,
                         keys_started=keys.started if keys is not None else None,
                         keys_expired=keys.expired if keys is not None else None,
                         keys_live=keys.live if keys is not None else None)


def progress_of(keeper: CutKeeper, stages: tuple[StageProgress, ...], stats: dict[str, StageStats],
                elapsed: float) -> Progress:
    """The run's progress: ``stages`` (each stage's part) and the run's figures, those of the
    stages that read a source (their counts in ``stats``, else their parts), the newest
    completed cut (before one completed: the one the run started from, None: none) and
    ``keeper``'s failed cuts."""
    sources = [s for s in stages if s.stage in {r.name for r in keeper.runners if keeper.is_source(r)}] or list(stages)
    counted = [stats[s.stage] for s in sources if s.stage in stats]
    batches = [c.latest_batch for c in counted] if counted else [s.batch_id for s in sources]
    records = sum(c.records for c in counted) if counted else sum(s.records for s in sources)
    completed = keeper.completed
    coordinators = [r.coordinator for r in keeper.runners if r.coordinator is not None]
    event_time = next((r.event_time.status() for r in keeper.runners if r.event_time is not None), None)
    return Progress(max((b for b in batches if b is not None), default=None), records,
                    records / elapsed if elapsed else 0.0, min((s.epoch for s in sources), default=0),
                    completed[-1].checkpoint_id if completed else (keeper.pipeline.last_completed or None),
                    sum(c.uploads_in_flight for c in coordinators), len(keeper.failed), event_time,
                    stages=stages, pipeline=keeper.name)


class StageHost(ABC):
    """Where a run's stages run: the other part of the run loop that depends on how the
    pipeline is deployed, beside who cuts (:class:`CutKeeper`). :class:`LocalStages` runs the
    keeper's stages in this process (their queries in this driver's SparkSession);
    :class:`~barrierflow.runtime.stage_processes.StageProcesses` runs each in a process of its
    own (``run --processes``)."""

    #: When the first progress line is due: ``progress_every`` seconds after the run started
    #: (True), or after every stage runs (False: a run whose start-up takes long, as stage
    #: processes do, would otherwise report progress on its first tick).
    progress_from_start: bool = True

    @property
    def stats(self) -> dict[str, StageStats]:
        """What the loop counts for each stage it ticks (empty: nothing counted here)."""
        return {}

    def figures(self, runner: StageRunner) -> tuple[StageCounts, StageCheckpoints | None] | None:
        """What the metrics feed observes of ``runner``'s stage this tick: its counts and its
        checkpoints (None before its coordinator started), or None while nothing is known.
        By default, what this loop counts and the stage's own coordinator."""
        stats = self.stats.get(runner.name)
        return None if stats is None else (stats, runner.coordinator)

    def freshness(self, runner: StageRunner) -> dict[str, list[Freshness]]:
        """Each sink's freshness figures of ``runner``'s stage in this run, oldest first
        (:mod:`barrierflow.runtime.freshness`). By default the runner's own, whose query runs here."""
        return runner.freshness.figures

    def key_figures(self, runner: StageRunner) -> KeyFigures | None:
        """Keys ``runner``'s stage's keyed functions started and expired in this run (None: it
        has none, or nothing is known yet). By default the runner's own counters."""
        return runner.key_figures()

    @abstractmethod
    def start(self, started: float) -> None:
        """Step 2: start every stage's query (``started``: when the run's clock started);
        return once each runs."""

    @abstractmethod
    def tick(self) -> None:
        """Step 3: every stage's tick, before the keeper's."""

    @abstractmethod
    def check(self) -> None:
        """Step 3: return while every stage runs.

        Raises:
            JobFailedError: a stage's query (or process) died.
            FencedOffError: the lease was taken over (a fenced-off write-ahead write stopped a query).
        """

    @abstractmethod
    def stop(self, *, failing: bool) -> None:
        """Step 5: stop every stage, in every case (``failing``: the run is already ending on
        another error, which the caller raises; nothing else is raised then)."""

    @abstractmethod
    def results(self, stopped: float) -> dict[str, StageResult]:
        """Step 6: each stage's part of the result, by name (``stopped``: when the stages stopped)."""


class LocalStages(StageHost):
    """The stages of ``driver``'s keeper in this process: their queries in the keeper's
    SparkSession, ticked, checked and stopped by the run loop."""

    def __init__(self, driver: PipelineRunner) -> None:
        self.driver = driver
        self._stats: dict[str, StageStats] = {}

    @property
    def stats(self) -> dict[str, StageStats]:
        return self._stats

    def start(self, started: float) -> None:
        """Each stage's query, in stage order (one waits for the previous one's source when
        :attr:`CutKeeper.wait_started`); a cluster's executors are checked to see the work dir
        once per driver. First every stage is checked against its saved state
        (:meth:`StageRunner.check_state`), so a refused stage leaves every stage unstarted.

        Raises:
            IncompatibleStateError: a stage's spec changed what its saved state was built with.
        """
        driver, keeper = self.driver, self.driver.keeper
        self._stats = {r.name: StageStats.at_start(r, started) for r in keeper.runners}
        for runner in keeper.runners:
            runner.check_state(keeper.pipeline.spark, spec_path=keeper.spec_path, run=keeper.stage_run(runner))
        for runner in keeper.runners:
            runner.start_query(keeper.pipeline.spark, spec_path=keeper.spec_path, run=keeper.stage_run(runner),
                               fence=keeper.pipeline.fence, check_work_dir=not driver.work_dir_checked,
                               wait=keeper.wait_started)
            driver.work_dir_checked = True  # every stage's work dir is below the pipeline's

    def tick(self) -> None:
        for runner in self.driver.keeper.runners:
            if runner.tick():
                self._stats[runner.name].committed(runner)

    def check(self) -> None:
        for runner in self.driver.keeper.runners:
            # a fenced-off write-ahead write stopped the query: FencedOffError
            runner.check(self.driver.keeper.pipeline.fence)

    def stop(self, *, failing: bool) -> None:
        """Stop the queries first, then drain each stage (its uploads, then its sinks' queued
        commits and aborts: :meth:`StageRunner.drain`, given ``checkpoint.timeout``, at most
        :data:`DRAIN_SECONDS`) and close its writer.

        Raises:
            SinkCommitFailedError, FencedOffError: the first stage whose drain raised (after
                every stage was drained; the others' are logged), unless ``failing`` (the run
                is already ending on another error; then every one is logged).
        """
        runners = self.driver.keeper.runners
        for runner in runners:
            runner.stop_query()
        first: SinkCommitFailedError | FencedOffError | None = None
        for runner in runners:
            try:
                runner.drain(min(runner.spec.checkpoint.timeout, DRAIN_SECONDS), failing=failing or first is not None)
            except (SinkCommitFailedError, FencedOffError) as exc:
                first = exc
            finally:
                runner.close_writer()
        if first is not None:
            raise first

    def results(self, stopped: float) -> dict[str, StageResult]:
        return {r.name: self._stats[r.name].result(r, stopped) for r in self.driver.keeper.runners}


def _queries_started(keeper: CutKeeper) -> StartupPhase:
    """The step once the queries started: replaying from the cut resumed from, or waiting."""
    if keeper.resumed_from is None:
        return StartupPhase("waiting", "queries started from the beginning; waiting for the first micro-batch")
    noun = words(keeper).cut_noun
    return StartupPhase("replaying", f"queries started from {noun} {keeper.resumed_from}: replaying what "
                                     "followed it; waiting for the first micro-batch")


class PipelineRunner:
    """The one run loop (module docstring) over ``keeper``'s stages, run where ``host`` says
    (None: in this process, :class:`LocalStages`)."""

    def __init__(self, keeper: CutKeeper, host: StageHost | None = None) -> None:
        self.keeper = keeper
        self.host: StageHost = host if host is not None else LocalStages(self)
        #: Whether this driver checked that a cluster's executors see the work dir (once per driver).
        self.work_dir_checked = False
        #: The run's stop request (step 4; :mod:`barrierflow.runtime.stopping`), once the run started.
        self._stop: StopFollower | None = None

    @property
    def runners(self) -> list[StageRunner]:
        return self.keeper.runners

    @property
    def stopping(self) -> Stopping | None:
        """The stop request the run took up (None: none); see step 4."""
        return self._stop.stopping if self._stop is not None else None

    @property
    def attempt(self) -> int:
        return self.keeper.pipeline.attempt

    def lease(self) -> JobLease:
        """The pipeline's lease (``<work_dir>/job.lease`` and the store's), not yet acquired."""
        pipeline = self.keeper.pipeline
        return JobLease(Path(pipeline.work_dir), pipeline.name, "run", store=pipeline.objects)

    def hold(self, lease: JobLease | None) -> None:
        """Run under ``lease`` (acquired by the caller): :meth:`RunningPipeline.hold`."""
        self.keeper.pipeline.hold(lease)

    def run_held(self, take_lease: bool = True, **options: Any) -> RunResult:
        """:meth:`run` (``options``) under the pipeline's lease, acquired for the run
        (``take_lease``; False: the caller holds it, or the run holds none) and released after."""
        Path(self.keeper.pipeline.work_dir).mkdir(parents=True, exist_ok=True)
        lease = self.lease()
        if take_lease:
            lease.acquire()
            self.hold(lease)  # every manifest, write-ahead batch and sink decision checks it
        try:
            return self.run(**options)
        finally:
            lease.release()
            self.hold(None)

    def barriers_only(self, on: bool) -> None:
        """Make every source stage's planner admit no new input but inject requested barriers
        (``on``: :meth:`~barrierflow.barriers.control.ControlChannel.set_barriers_only`), or admit
        input again. Stages fed by channels read on: their barriers are in their input."""
        from barrierflow.barriers.control import ControlChannel

        for runner in self.keeper.runners:
            if not runner.stage.input_partitions:
                ControlChannel(runner.stage.layout.control).set_barriers_only(on)

    def check_bounded(self) -> None:
        """Raise UserInputError unless every source stage reads a bounded source (what
        ``until_exhausted`` needs), before anything is started."""
        self.keeper.source_ends()

    def check_lease(self) -> None:
        """Raise FencedOffError once the lease's heartbeat found it taken over."""
        lease = self.keeper.pipeline.lease
        if lease is not None and lease.lost is not None:
            lease.check("doing anything more")

    def run(self, *, duration: float | None = None, checkpoints: int | None = None, until_exhausted: bool = False,
            progress: Callable[[Any], None] | None = None, progress_every: float = 1.0,
            on_tick: Callable[[], None] | None = None, until: Callable[[], bool] | None = None,
            metrics: MetricsSpec | None = None, phases: PhaseReport | None = None,
            retention: RunRetention | None = None) -> RunResult:
        """Run until the stop rule holds (module docstring, step 4); with no limit, until interrupted.
        With ``metrics``, serve the run's Prometheus metrics at its address from step 1 (so
        ``metrics.json`` never names a dead run's port while the restore runs) to step 5
        (:mod:`barrierflow.metrics`), fed every tick before ``on_tick``. ``phases`` is told each
        step of the start (:mod:`barrierflow.runtime.startup`) up to the first micro-batch. With
        ``retention``, apply ``checkpoint.retained`` as cuts complete (started before the stages,
        told every tick after the keeper's, retained on its own thread), and once more after
        step 5 when the run ended normally (:mod:`barrierflow.retention.run_retention`).

        ``duration`` counts from the start of the stages (after the restore at start): it
        includes their queries' (or processes') start-up.

        Raises:
            TolerableFailuresExceededError: too many consecutive checkpoints failed (one stage).
            JobFailedError: a stage's query (or process) died.
            FencedOffError: the lease was taken over.
            SinkCommitFailedError: a sink could not commit (or abort) an epoch, also the run's last one.
            UserInputError: ``until_exhausted`` with an unbounded source; the metrics address
                cannot be bound.
        """
        keeper, host = self.keeper, self.host
        lease = keeper.pipeline.lease
        watch = (StopWatch(keeper.pipeline.objects, lease.token.fence)
                 if lease is not None and lease.token is not None else None)
        self._stop = stop = StopFollower(watch, keeper, self.barriers_only)
        feed = self._metrics_feed(metrics).start() if metrics is not None else None
        try:
            # Step 1. Restore at start.
            keeper.resumed_from = keeper.pipeline.restore_at_start(follows=keeper.follows_cuts, phases=phases)
            if feed is not None:
                feed.metrics.attempt = keeper.pipeline.attempt
            ends = keeper.source_ends() if until_exhausted else None
            # Step 2. The coordinators, then the stages' queries.
            keeper.start(checkpoints=checkpoints)
        except BaseException:
            if feed is not None:
                feed.stop()
            raise
        started = time.monotonic()
        ended = False  # the loop reached a stop condition (no error is on its way out)
        stop_done = False  # it was a stop request's
        first_batch = phases is not None and bool(self.runners)
        try:
            if retention is not None:
                retention.start()  # a killed run's retention announcement would hold up every upload
            host.start(started)
            keeper.queries_started()
            if first_batch:
                assert phases is not None
                phases(_queries_started(keeper))
            next_progress = (started if host.progress_from_start else time.monotonic()) + progress_every
            while True:
                # Step 3. One tick.
                self.check_lease()  # the heartbeat found the lease taken over
                host.tick()
                keeper.tick()
                if retention is not None:
                    retention.completed(keeper.completed_count, *self._cuts_in_flight())
                if feed is not None:
                    elapsed = time.monotonic() - started
                    for runner in self.runners:
                        if (figures := host.figures(runner)) is not None:
                            feed.observe(runner.name, *figures, elapsed)
                        feed.freshness(runner.name, host.freshness(runner))
                        if (keys := host.key_figures(runner)) is not None:
                            feed.keys(runner.name, started=keys.started, expired=keys.expired, live=keys.live)
                if on_tick is not None:
                    on_tick()
                if first_batch and host.stats and all(s.batches > 0 for s in host.stats.values()):
                    first_batch = False
                    assert phases is not None
                    phases(StartupPhase("running", f"first micro-batch done {time.monotonic() - started:.1f} s "
                                                   "after the queries started"))
                stop_done = stop.tick()
                now = time.monotonic()
                if progress is not None and now >= next_progress:
                    next_progress = now + progress_every
                    progress(keeper.progress(host.stats, now - started))
                host.check()
                # Step 4. The stop rule (a stop request: followed above).
                deadline = started + duration if duration is not None else None
                if stop_done or self._limit_reached(checkpoints=checkpoints, ends=ends, deadline=deadline, until=until):
                    break
                time.sleep(keeper.tick_seconds)
            if progress is not None and keeper.final_progress:
                progress(keeper.progress(host.stats, time.monotonic() - started))
            ended = True
        finally:
            # Step 5. Raises the failure of a sink commit no tick reported (the last checkpoint's)
            # unless the loop is already raising another error.
            if feed is not None:
                feed.stop()
            clean = False  # every stage stopped and drained without an error
            try:
                self.stop(failing=not ended)
                clean = ended
            finally:
                if retention is not None:  # waits for its thread; retains the last cuts after a normal end
                    pending, newest = self._cuts_in_flight()
                    retention.finish(count=keeper.completed_count, pending=pending, newest=newest, final=clean)
        # Step 6. The result.
        stopped = time.monotonic()
        stopping = self.stopping if stop_done else None
        return RunResult(keeper.name, stopped - started, list(keeper.completed), list(keeper.failed),
                         host.results(stopped), tuple(r.name for r in self.runners if keeper.is_source(r)),
                         stopped_by=stopping.request if stopping is not None else None,
                         savepoint=stopping.savepoint if stopping is not None else None)

    def _cuts_in_flight(self) -> tuple[list[int], int | None]:
        """The ids of the cuts pending in the cut coordinator, and the newest completed one's (None: none)."""
        cutter, completed = self.keeper.cutter, self.keeper.completed
        return (list(cutter.pending) if cutter is not None else [],
                completed[-1].checkpoint_id if completed else None)

    def _metrics_feed(self, spec: MetricsSpec) -> MetricsFeed:
        from barrierflow.metrics.feed import MetricsFeed

        return MetricsFeed(spec, pipeline=self.keeper.name, attempt=self.keeper.pipeline.attempt,
                           work_dir=self.keeper.pipeline.work_dir,
                           dead_letter_uris={r.name: r.layout.dead_letter_uri(r.spec) for r in self.runners})

    def _limit_reached(self, *, checkpoints: int | None, ends: dict[str, dict[str, int]] | None,
                       deadline: float | None, until: Callable[[], bool] | None) -> bool:
        keeper = self.keeper
        return ((checkpoints is not None and keeper.completed_count >= checkpoints)
                or (ends is not None and covered(keeper.completed, lambda cut: keeper.at_end(cut, ends)))
                or (deadline is not None and time.monotonic() >= deadline)
                or (until is not None and until()))

    def stop(self, *, failing: bool = False) -> None:
        """Stop every stage: :meth:`StageHost.stop` (what it raises)."""
        self.host.stop(failing=failing)
