"""Running a pipeline of several stages: one streaming query per stage, one pipeline coordinator.

:class:`StagedPipelineJob` turns each stage of a :class:`PipelineSpec` into a stage job
(a single-stage :class:`StageSpec` under the hood: name ``<pipeline>-<stage>``, work dir
``<work_dir>/stages/<stage>``, checkpoint store ``<checkpoint.storage>/stages/<stage>``; a
channel source becomes a Kafka source read through ``barrierflow_channel``, a channel sink is
written by :class:`~barrierflow.sinks.channel.ChannelWriter`), starts every query in one
SparkSession (tests share one; :mod:`barrierflow.runtime.stage_processes` runs one process and
application per stage, :meth:`StagedPipelineJob.run_stage`), and drives each
stage's checkpoint coordinator (never triggering, sink commits deferred) and the
:class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator` from the one run
loop (:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`).

Every start after the first restores the latest global checkpoint
(:func:`barrierflow.recovery.cut_restore.restore_cut`, through :meth:`StagedPipelineJob.restore`):
a new attempt, whose channel sources skip what older attempts wrote after the restored barriers
(:mod:`barrierflow.barriers.cutoffs`); a stage never simply resumes its own Spark checkpoint,
because a batch it replays would write its channel records a second time.

Supported so far: one sink per stage, and one source or several channel sources (read as one
source over their topics, so one planner aligns every input partition); channel
``bootstrap`` given as an address or ``env:VAR``, or ``embedded`` resolved by the caller
(``channel_servers``). Cycles: a stage may read a back-edge channel (``spec.graph``) beside its
forward channels; its source never waits for barriers on the back-edge and logs what arrives
there between its snapshot and the barrier as channel state (include/pipelines/cycle.yaml).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest
from barrierflow.checkpointing.global_store import AttemptCutoffRecord, GlobalCheckpointStore
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.pipeline_coordinator import PipelineCoordinator, StageHandle
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointNotFoundError, JobFailedError, UserInputError
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS
from barrierflow.pipeline.model import OFFLINE_SERVERS, pipeline_work_dir, stages_of
from barrierflow.runtime.pipeline_runner import CutKeeper, PipelineRunner, RunResult, StageStats
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.runtime.startup import StartupPhase
from barrierflow.sources.registry import StageRun, reached, source_kind
from barrierflow.spec.graph import StageGraph, build_graph
from barrierflow.spec.stages import PipelineSpec
from barrierflow.storage import ObjectStore, open_store
from barrierflow.transactions.committer import HeldCommits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.lease import FenceToken, JobLease
    from barrierflow.recovery.cut_restore import CutRestoreReport

log = logging.getLogger(__name__)
TICK_SECONDS = 0.02
#: How often a stage run in its own process looks for newly decided global checkpoints (seconds).
FOLLOW_SECONDS = 0.2



@dataclass(frozen=True)
class StageProgress:
    """One stage's part of the progress display: its last batch, the rate Spark reported for
    it (records/s processed), and the epoch it is in (the checkpoint its next barrier completes);
    with the records it read and the batches it committed in this run (what the metrics feed
    counts)."""

    stage: str
    batch_id: int | None
    records_per_second: float
    epoch: int
    records: int = 0
    batches: int = 0


@dataclass(frozen=True)
class PipelineProgress:
    """What the one progress display of a multi-stage run shows, every ``progress_every`` seconds."""

    pipeline: str
    stages: tuple[StageProgress, ...]
    last_completed: int | None
    failed: int



class StagedPipelineJob:
    """See the module docstring. ``channel_servers`` maps channel name -> ``host:port`` list
    for channels whose ``bootstrap`` is ``embedded``. With ``hold_commits`` the final stages'
    sinks pre-commit every epoch but commit none
    (:class:`~barrierflow.transactions.committer.HeldCommits`: an upgrade's canary); the
    channels between stages are written as usual."""

    def __init__(self, spec: PipelineSpec, *, spec_path: str = "<spec>", spark: SparkSession | None = None,
                 channel_servers: dict[str, str] | None = None, hold_commits: bool = False) -> None:
        graph, problems = build_graph(spec)
        if graph is None:
            raise UserInputError(f"pipeline {spec.name}: {problems}")
        self.spec = spec
        self.spec_path = spec_path
        self.hold_commits = hold_commits
        self.graph: StageGraph = graph
        self._spark = spark
        self.servers = {c.name: self._servers(c.name, channel_servers or {}) for c in spec.channels}
        self.work_dir = pipeline_work_dir(spec)
        self.objects = open_store(spec.checkpoint.storage)
        #: The pipeline's global records (``global/``, ``_cutoffs.json``, ``_pipeline.json``).
        self.global_store = GlobalCheckpointStore(self.objects, spec.name)
        #: Every stage as :mod:`barrierflow.pipeline.model` opens it, with the channels' real addresses.
        self.parts = stages_of(spec, graph, work_dir=self.work_dir, servers=self.servers)
        self.stages = [StageRunner(part, label=f"stage {part.name} of pipeline {spec.name}", pipeline=spec.name)
                       for part in self.parts]
        self.attempt = 0
        self.last_completed = 0
        self.coordinator: PipelineCoordinator | None = None
        #: The pipeline's lease on the checkpoint store while a run or restore holds it (:meth:`hold`).
        self.lease: JobLease | None = None
        self._fence: FenceToken | None = None
        #: The one run driver, with the pipeline coordinator as its cut keeper.
        self.driver = PipelineRunner(GlobalCuts(self))

    def hold(self, lease: JobLease | None, *, token: FenceToken | None = None) -> None:
        """Write under ``lease`` (acquired by the caller, None: no lease) or, in a stage process
        of ``run --processes``, under its supervisor's ``token``: the fencing number is checked
        before every stage manifest, write-ahead micro-batch of a final stage, 2PC decision and
        global manifest, and recorded with them, exactly as for a single-stage job, so a
        stalled driver that wakes up after a restore elsewhere commits nothing (raises
        :class:`~barrierflow.lease.FencedOffError`). Call it before :meth:`run`,
        :meth:`run_stage` or :meth:`restore`."""
        self.lease = lease
        self._fence = token if token is not None else (lease.token if lease is not None else None)
        for job in self.stages:
            job.store.fence = self._fence

    @property
    def fence(self) -> FenceToken | None:
        """The fencing token writes are checked against (None: no lease held)."""
        return self._fence

    def check_lease(self) -> None:
        """Raise FencedOffError once the lease's heartbeat found it taken over."""
        if self.lease is not None and self.lease.lost is not None:
            self.lease.check("doing anything more")

    @classmethod
    def offline(cls, spec: PipelineSpec, *, spec_path: str = "<spec>") -> StagedPipelineJob:
        """The pipeline opened beside a run, to read its stores (tests, benchmarks): channels on
        the embedded broker get no address (that broker runs only with its pipeline); :meth:`run`
        refuses. Offline operations open :func:`barrierflow.pipeline.model.open_pipeline`."""
        placeholders = {c.name: OFFLINE_SERVERS for c in spec.channels if c.is_embedded}
        return cls(spec, spec_path=spec_path, channel_servers=placeholders)

    def _servers(self, channel: str, given: dict[str, str]) -> str:
        servers = self.spec.channel(channel).bootstrap_servers()
        if servers is not None:
            return servers
        if channel in given:
            return given[channel]
        raise UserInputError(
            f"channel {channel!r} has bootstrap 'embedded' but no broker address was given; run the pipeline "
            "with 'barrierflow run' (which starts the embedded broker), or give the channel an address or 'env:VAR'")

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from barrierflow.runtime.session import build_session

            self._spark = build_session(self.spec.spark, app_name=f"barrierflow-{self.spec.name}",
                                        sources=[s for stage in self.spec.stages for s in stage.sources],
                                        work_dirs=[self.spec.work_dir or ""])
        return self._spark

    # -- building -----------------------------------------------------------------------
    def stage_run(self, job: StageRunner) -> StageRun:
        """What ``job``'s reader is told beyond its spec in this run: the attempt, the last
        completed global checkpoint, its back-edge topics, cutoffs and slow partitions."""
        return StageRun(attempt=self.attempt, last_completed=self.last_completed,
                        back_edge_topics=job.stage.back_edge_topics,
                        cutoffs=self.global_store.stage_cutoffs(job.name), rate_factors=job.stage.rate_factors)

    # -- restoring ----------------------------------------------------------------------
    @property
    def root_store(self) -> CheckpointStore:
        """The pipeline-level store: attempt and abandoned global ids (``_pipeline.json``)."""
        return self.global_store.root

    def global_checkpoints(self) -> list[int]:
        """Ids of completed global checkpoints, not abandoned by a restore, ascending."""
        return self.global_store.completed_ids()

    def cutoffs(self) -> list[AttemptCutoffRecord]:
        """Every restore's attempt cutoffs, oldest first (:meth:`GlobalCheckpointStore.cutoffs`,
        which reads a legacy ``_fences.json`` too).

        Raises:
            CheckpointCorruptError: the cutoffs file does not parse.
        """
        return self.global_store.cutoffs()

    def restore(self, checkpoint_id: int | None = None) -> CutRestoreReport:
        """Restore every stage to global checkpoint ``checkpoint_id`` (None: the latest):
        :func:`barrierflow.recovery.cut_restore.restore_cut` (its errors) over this job's stages."""
        from barrierflow.recovery.cut_restore import restore_cut

        return restore_cut(self.spec, self.parts, self.global_store, checkpoint_id)

    def restore_initial(self) -> CutRestoreReport:
        """Restore the initial cut (the pipeline completed no global checkpoint):
        :func:`barrierflow.recovery.cut_restore.restore_initial_cut` over this job's stages."""
        from barrierflow.recovery.cut_restore import restore_initial_cut

        return restore_initial_cut(self.spec, self.parts, self.global_store)

    def has_earlier_run(self) -> bool:
        """Whether a run of this pipeline left local state, global records or an attempt (so a
        new run restores the latest global checkpoint, or the initial cut, and needs the
        channels' records of that run)."""
        return any(job.layout.spark_checkpoint.exists() for job in self.stages) or self.global_store.has_records()

    def prepare(self) -> None:
        """What happens once per run, before any stage starts (by whoever runs the pipeline
        coordinator): a start after an earlier run restores the latest global checkpoint (or,
        when none completed, the initial cut) as a new attempt; the attempt and the last
        completed global checkpoint are loaded; every channel's topic exists.

        Raises:
            UserInputError: the pipeline was opened offline.
        """
        if OFFLINE_SERVERS in self.servers.values():
            raise UserInputError(f"pipeline {self.spec.name} was opened offline (StagedPipelineJob.offline) and "
                                 "cannot run; open it with its channels' broker addresses")
        if self.has_earlier_run():  # every later start is a new attempt from the latest global checkpoint
            if self.global_checkpoints():
                self.restore()
            else:
                self.restore_initial()
        self.load_attempt()
        from barrierflow.kafka_io.admin import ensure_topic

        for channel in self.spec.channels:  # before any stage reads one
            ensure_topic(self.servers[channel.name], channel.topic_for(self.spec.name), channel.partitions,
                         channel.client)

    def load_attempt(self) -> None:
        """The pipeline's current attempt and last completed global checkpoint, from the store."""
        self.attempt = self.root_store.attempt()
        self.last_completed = (self.global_checkpoints() or [0])[-1]

    def _start_coordinator(self, job: StageRunner) -> StageHandle:
        """Start ``job``'s checkpoint coordinator (it never triggers: barriers come from the
        pipeline coordinator or in-band; its sink commits wait for the global checkpoint); its
        handle for the pipeline coordinator."""
        from barrierflow.sinks.factory import build_sink

        sink = build_sink(job.spec, job.store, job.layout, attempt=self.attempt)
        if self.hold_commits and job.name in self.graph.final_stages:
            sink = HeldCommits(sink)
        coordinator = job.start_coordinator(
            sinks=[sink], attempt=self.attempt,
            spark_version=self.spark.version, commit_on_completion=False)
        coordinator.trigger_limit = 0
        return self.handle(job, coordinator)

    def handle(self, job: StageRunner, coordinator: CheckpointCoordinator | None = None) -> StageHandle:
        """What the pipeline coordinator knows of ``job`` (``coordinator`` None: the stage runs
        in another process and follows the global checkpoints itself, :meth:`run_stage`)."""
        return StageHandle(job.name, job.store, ControlChannel(job.layout.control), coordinator,
                           is_source=job.name in self.graph.source_stages,
                           is_final=job.name in self.graph.final_stages)

    def run_stage(self, name: str, *, stop_requested: Callable[[], int | None],
                  started: Callable[[], None] = lambda: None,
                  alive: Callable[[], bool] = lambda: True,
                  progress: Callable[[StageProgress], None] | None = None,
                  progress_every: float = 1.0) -> list[Manifest]:
        """Run one stage in this process (one Spark application per stage): its query and its
        checkpoint coordinator, while the pipeline coordinator runs elsewhere
        (:mod:`barrierflow.runtime.stage_processes`) and has already called :meth:`prepare`.

        A final stage follows the global checkpoints in the store itself: it commits its 2PC
        sinks up to ``n`` once ``global/chk-<n>/_metadata.json`` exists and aborts ``n`` once
        ``_failed.json`` does, in checkpoint order. ``started`` is called once the query runs;
        the stage stops when ``stop_requested`` returns the last completed global checkpoint
        (a final stage first commits up to it, waited for as the stage stops), or fails when
        ``alive`` turns False (its supervisor is gone). Returns the stage manifests completed in
        this run.

        Raises:
            JobFailedError: the query died, or the supervisor is gone.
            SinkCommitFailedError: a sink commit (or abort) failed, also the last one.
        """
        keeper = FollowedCuts(self, name, stop_requested=stop_requested, started=started, alive=alive)
        result = PipelineRunner(keeper).run(progress=progress, progress_every=progress_every,
                                            until=lambda: keeper.stop is not None)
        return result.stages[name].completed

    def _follow_globals(self, job: StageRunner, decided: int) -> int:
        """Commit (complete) or abort (failed) ``job``'s sinks for the global checkpoints after
        ``decided``, in order, stopping at the first one still undecided; returns the last
        decided id."""
        assert job.coordinator is not None
        highest = max([decided, *(m.checkpoint_id for m in job.coordinator.completed),
                       *job.coordinator.pending.keys()])
        for cid in range(decided + 1, highest + 1):
            status = self.global_store.status(cid)
            if status == "completed":
                if not job.coordinator.commit_sinks(cid):
                    log.warning("global checkpoint %d: stage %s did not complete it in this run; its sinks commit "
                                "it when the stage recovers", cid, job.name)
            elif status == "failed":
                job.coordinator.abort_sinks(cid)
            else:
                return cid - 1
        return highest

    def _stage_progress(self, job: StageRunner, stats: StageStats | None = None) -> StageProgress:
        last = job.query.lastProgress if job.query is not None else None
        epoch = job.coordinator.current_epoch() if job.coordinator is not None else self.last_completed + 1
        return StageProgress(job.name, int(last["batchId"]) if last else None,
                             float(last.get("processedRowsPerSecond") or 0.0) if last else 0.0, epoch,
                             records=stats.records if stats is not None else 0,
                             batches=stats.batches if stats is not None else 0)

    def run(self, *, checkpoints: int | None = None, duration: float | None = None,
            until_exhausted: bool = False, progress: Callable[[PipelineProgress], None] | None = None,
            progress_every: float = 1.0) -> RunResult:
        """Run until ``checkpoints`` global checkpoints completed, ``duration`` seconds passed,
        or (``until_exhausted``, bounded sources) two global checkpoints cover every record of
        every source stage: the one run loop (:meth:`PipelineRunner.run`) with this pipeline's
        :class:`GlobalCuts`. The queries are stopped and the stages' queued sink commits and
        aborts waited for in every case (:meth:`StageRunner.drain`, as for a single stage).
        ``progress`` (if given) is called with a :class:`PipelineProgress` every
        ``progress_every`` seconds from the run loop, and once more when the run's limit is
        reached.

        Raises:
            JobFailedError: a stage's query died.
            SinkCommitFailedError: a final stage's sink could not commit (or abort) an epoch,
                also the run's last one, whose commit the loop's last tick queued.
        """
        return self.driver.run(checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted,
                               progress=progress, progress_every=progress_every)

    def _progress(self, coordinator: PipelineCoordinator) -> PipelineProgress:
        stages = [self._stage_progress(job) for job in self.stages]
        completed = coordinator.completed
        return PipelineProgress(self.spec.name, tuple(stages),
                                completed[-1].checkpoint_id if completed else (self.last_completed or None),
                                len(coordinator.failed))

    def check_bounded(self) -> None:
        """Raise UserInputError unless every source stage reads a bounded source (what
        ``until_exhausted`` needs), before anything is started."""
        self.source_ends()

    def source_ends(self) -> dict[str, dict[str, int]]:
        ends = {}
        for job in self.stages:
            if job.name in self.graph.source_stages:
                end = source_kind(job.spec.source).bounded_end(job.spec.source)
                if end is None:
                    raise UserInputError(f"--until-exhausted needs bounded sources, but stage {job.name!r} "
                                         "reads an unbounded one; give it an end (e.g. records_per_partition; "
                                         "Kafka topics are read to their end offsets when the run starts) or "
                                         "use --checkpoints/--duration")
                ends[job.name] = end
        return ends

    def cut_at_end(self, manifest: GlobalManifest, ends: dict[str, dict[str, int]]) -> bool:
        """Whether global checkpoint ``manifest`` has the source stages' barriers at their
        sources' ``ends`` and no channel state in any stage (records in flight at an unaligned
        snapshot are processed in the next epoch, so their output is not covered yet); two such
        cut end a run with ``until_exhausted`` (:func:`~barrierflow.runtime.pipeline_runner.covered`)."""
        at_end = all(reached(self.stage_job(name).store.get(manifest.checkpoint_id).barrier_offsets.get(
            self.stage_job(name).spec.source.name), end) for name, end in ends.items())
        return at_end and all(part.channel_state_records == 0 for part in manifest.stages.values())

    def stage_job(self, name: str) -> StageRunner:
        return next(j for j in self.stages if j.stage.name == name)


class _PipelineJobCuts(CutKeeper):
    """A cut keeper over a :class:`StagedPipelineJob`: its session, stores, lease and attempt
    are the job's (the part :class:`GlobalCuts` and :class:`FollowedCuts` share)."""

    job: StagedPipelineJob

    @property
    def spark(self) -> SparkSession:
        return self.job.spark

    @property
    def work_dir(self) -> str:
        return self.job.work_dir

    @property
    def objects(self) -> ObjectStore:
        return self.job.objects

    @property
    def fence(self) -> FenceToken | None:
        return self.job.fence

    @property
    def lease(self) -> JobLease | None:
        return self.job.lease

    @property
    def attempt(self) -> int:
        return self.job.attempt

    def hold(self, lease: JobLease | None) -> None:
        self.job.hold(lease)

    def is_source(self, runner: StageRunner) -> bool:
        return runner.name in self.job.graph.source_stages


class GlobalCuts(_PipelineJobCuts):
    """Who cuts a pipeline of several stages: the pipeline coordinator, whose global checkpoints
    are the cuts (module docstring of :mod:`barrierflow.runtime.pipeline_runner`)."""

    tick_seconds = TICK_SECONDS
    layout = GLOBAL_CHECKPOINTS

    def __init__(self, job: StagedPipelineJob) -> None:
        self.job = job
        self.name = job.spec.name
        self.spec_path = job.spec_path
        self.runners = job.stages
        self._at_end: dict[int, bool] = {}

    @property
    def cutter(self) -> PipelineCoordinator | None:
        """The pipeline coordinator (once started): it triggers the global checkpoints."""
        return self.job.coordinator

    def source_ends(self) -> dict[str, dict[str, int]]:
        return self.job.source_ends()

    def prepare(self) -> None:
        job = self.job
        restoring = job.global_checkpoints() if job.has_earlier_run() else []  # what job.prepare() restores
        if restoring and self.phases is not None:
            self.phases(StartupPhase("restoring", f"restoring global checkpoint {restoring[-1]} in its "
                                                  f"{len(job.stages)} stages as a new attempt"))
        job.prepare()
        self.resumed_from = restoring[-1] if restoring else None

    def start(self, *, checkpoints: int | None) -> None:
        job = self.job
        stages = [job._start_coordinator(runner) for runner in job.stages]
        coordinator = PipelineCoordinator(job.spec.name, job.spec.checkpoint, job.objects, stages,
                                          attempt=job.attempt, fence=job.fence)
        if job.fence is not None:
            job.fence.attempt = job.attempt
        job.coordinator = coordinator
        coordinator.start()
        coordinator.trigger_limit = checkpoints

    def stage_run(self, runner: StageRunner) -> StageRun:
        return self.job.stage_run(runner)

    def tick(self) -> None:
        assert self.job.coordinator is not None
        self.job.coordinator.tick()

    @property
    def completed(self) -> list[GlobalManifest]:
        return self.job.coordinator.completed if self.job.coordinator is not None else []

    @property
    def failed(self) -> list[GlobalFailure]:
        return self.job.coordinator.failed if self.job.coordinator is not None else []

    def at_end(self, cut: GlobalManifest, ends: dict[str, dict[str, int]]) -> bool:
        """Decided once per cut, from its stages' manifests, when the run loop first asks (the
        tick it completed); the run's retention of ``checkpoint.retained`` deletes them later.
        A cut already deleted by then (several completed at once) is not at the end."""
        known = self._at_end.get(cut.checkpoint_id)
        if known is None:
            try:
                known = self.job.cut_at_end(cut, ends)
            except CheckpointNotFoundError:
                known = False
            self._at_end[cut.checkpoint_id] = known
        return known

    def queries_started(self) -> None:
        """Nothing: the pipeline coordinator started before the queries."""

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> PipelineProgress:
        assert self.job.coordinator is not None
        return self.job._progress(self.job.coordinator)


class FollowedCuts(_PipelineJobCuts):
    """One stage of several in a process of its own (``run --processes``,
    :meth:`StagedPipelineJob.run_stage`): the supervisor's pipeline coordinator cuts; this stage
    follows its global checkpoints. A final stage commits its sinks up to each completed one and
    aborts each failed one, in order (:meth:`StagedPipelineJob._follow_globals`), every
    :data:`FOLLOW_SECONDS` and once more when the stop is requested; the run stops when
    ``stop_requested`` returns the last completed global checkpoint (:attr:`stop`) and fails
    when ``alive`` turns False."""

    tick_seconds = TICK_SECONDS
    final_progress = False

    def __init__(self, job: StagedPipelineJob, stage: str, *, stop_requested: Callable[[], int | None],
                 started: Callable[[], None], alive: Callable[[], bool]) -> None:
        self.job = job
        self.name = job.spec.name
        self.spec_path = job.spec_path
        self.runner = job.stage_job(stage)
        self.runners = [self.runner]
        self.final = stage in job.graph.final_stages
        self._stop_requested, self._started, self._alive = stop_requested, started, alive
        self.decided = 0
        self.next_follow = 0.0
        #: The last completed global checkpoint once the supervisor asked the stage to stop.
        self.stop: int | None = None

    def source_ends(self) -> dict[str, dict[str, int]]:
        raise UserInputError("a stage process runs until its supervisor stops it; --until-exhausted is the "
                             "supervisor's ('barrierflow run SPEC --processes --until-exhausted')")

    def prepare(self) -> None:
        """The supervisor restored the pipeline; this stage loads the attempt it made."""
        self.job.load_attempt()
        if self.job.fence is not None:
            self.job.fence.attempt = self.job.attempt
        self.decided = self.job.last_completed

    def start(self, *, checkpoints: int | None) -> None:
        self.job._start_coordinator(self.runner)

    def stage_run(self, runner: StageRunner) -> StageRun:
        return self.job.stage_run(runner)

    def queries_started(self) -> None:
        self._started()

    def tick(self) -> None:
        stop = self._stop_requested()
        if self.final and (stop is not None or time.monotonic() >= self.next_follow):
            self.next_follow = time.monotonic() + FOLLOW_SECONDS
            self.decided = self.job._follow_globals(self.runner, self.decided)
        self.stop = stop
        if stop is None and not self._alive():
            raise JobFailedError(f"stage {self.runner.name} of pipeline {self.name}: its supervisor (the pipeline "
                                 "coordinator) is gone; the pipeline restarts from its latest global checkpoint "
                                 "when it is run again")

    @property
    def completed(self) -> list[Manifest]:
        return self.runner.coordinator.completed if self.runner.coordinator is not None else []

    @property
    def failed(self) -> list[FailureRecord]:
        return self.runner.coordinator.failed if self.runner.coordinator is not None else []

    def at_end(self, cut: Manifest, ends: dict[str, dict[str, int]]) -> bool:
        return False  # never asked: source_ends refuses

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> StageProgress:
        return self.job._stage_progress(self.runner, stats.get(self.runner.name))
