"""One pipeline while it runs: what every run has, in every shape.

A :class:`RunningPipeline` holds the run's SparkSession (built from the spec on first use,
unless one is handed in), its stores (every stage's checkpoint store and the pipeline's global
records, ``global/``, ``_cutoffs.json``, ``_pipeline.json``, on the one checkpoint storage),
its stage runners (:class:`~barrierflow.runtime.stage_runner.StageRunner`, in the spec's
order), the pipeline's lease and fencing token while a run holds them (:meth:`hold`), and the
attempt. A pipeline of one stage is the general case with N = 1: one runner, whose store is
the single-stage layout (``<checkpoint.storage>/<pipeline>``).

What differs between a stage's own checkpoints, global checkpoints and a stage following its
supervisor's cuts is not here but in the run's cut keeper
(:class:`~barrierflow.runtime.pipeline_runner.CutKeeper`, :mod:`barrierflow.runtime.cuts`),
whose :meth:`~barrierflow.runtime.pipeline_runner.CutKeeper.prepare` is the one restore at
start; the records it reads and restores (:meth:`global_checkpoints`, :meth:`restore`,
:meth:`load_attempt`) are the pipeline's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.global_store import AttemptCutoffRecord, GlobalCheckpointStore
from barrierflow.checkpointing.pipeline_coordinator import StageHandle
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import OFFLINE_SERVERS, Stage, pipeline_work_dir, stages_of
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.sources.registry import source_kind
from barrierflow.spec.graph import StageGraph, build_graph
from barrierflow.spec.models import StageSpec
from barrierflow.spec.stages import PipelineSpec
from barrierflow.storage import ObjectStore, open_store
from barrierflow.transactions.committer import HeldCommits, SinkCommitter
from barrierflow.workdir.layout import JobLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.checkpointing.coordinator import CheckpointCoordinator
    from barrierflow.lease import FenceToken, JobLease
    from barrierflow.recovery.cut_restore import CutRestoreReport
    from barrierflow.spec.models import SourceSpec, SparkSpec

__all__ = ["RunningPipeline", "forwarded"]


class RunningPipeline:
    """The running pipeline of the module docstring; open it with :meth:`of_stage` (one stage
    on its own checkpoints) or :meth:`of_stages` (several stages, global checkpoints).
    ``hold_commits``: the final stages' sinks pre-commit every epoch but commit none
    (:class:`~barrierflow.transactions.committer.HeldCommits`: an upgrade's canary)."""

    def __init__(self, spec: StageSpec | PipelineSpec, *, spec_path: str, stages: Sequence[StageRunner],
                 objects: ObjectStore, work_dir: str, spark_spec: SparkSpec, sources: Sequence[SourceSpec],
                 spark: SparkSession | None = None, source_stages: Sequence[str], final_stages: Sequence[str],
                 hold_commits: bool = False, graph: StageGraph | None = None,
                 servers: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.name = spec.name
        #: Every stage's runner, in the spec's order.
        self.stages = list(stages)
        self.objects = objects
        self.work_dir = work_dir
        self.hold_commits = hold_commits
        self.graph = graph
        #: Channel name -> its broker's address (none for one stage).
        self.servers = dict(servers or {})
        self.source_stages = tuple(source_stages)
        self.final_stages = tuple(final_stages)
        #: The pipeline's global records (``global/``, ``_cutoffs.json``, ``_pipeline.json``).
        self.global_store = GlobalCheckpointStore(objects, spec.name)
        self.attempt = 0
        #: The newest global checkpoint completed before this run (0: none; :meth:`load_attempt`).
        self.last_completed = 0
        #: The pipeline's lease while a run or restore holds it (:meth:`hold`).
        self.lease: JobLease | None = None
        self._fence: FenceToken | None = None
        self._spark = spark
        self._spark_spec, self._sources = spark_spec, list(sources)

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def of_stage(cls, spec: StageSpec, *, spec_path: str = "<spec>", spark: SparkSession | None = None,
                 checkpoint_objects: ObjectStore | None = None, layout: JobLayout | None = None,
                 hold_commits: bool = False) -> RunningPipeline:
        """A pipeline of one stage on its own checkpoints (``checkpoint_objects``, ``layout``:
        injected by tests; None: the spec's)."""
        layout = layout or JobLayout.for_spec(spec)
        store = CheckpointStore.for_spec(spec, checkpoint_objects)
        runner = StageRunner(Stage(spec.name, spec, store, layout), label=f"pipeline {spec.name}")
        return cls(spec, spec_path=spec_path, stages=[runner], objects=store.objects, work_dir=str(layout.work_dir),
                   spark_spec=spec.spark, sources=spec.sources, spark=spark, source_stages=[spec.name],
                   final_stages=[spec.name], hold_commits=hold_commits)

    @classmethod
    def of_stages(cls, spec: PipelineSpec, *, spec_path: str = "<spec>", spark: SparkSession | None = None,
                  channel_servers: Mapping[str, str] | None = None, hold_commits: bool = False) -> RunningPipeline:
        """A pipeline of several stages (``channel_servers``: the addresses of channels whose
        ``bootstrap`` is ``embedded``; :data:`~barrierflow.pipeline.model.OFFLINE_SERVERS` opens
        it offline, to read its stores).

        Raises:
            UserInputError: the stages do not form a graph, or an embedded channel has no address.
        """
        graph, problems = build_graph(spec)
        if graph is None:
            raise UserInputError(f"pipeline {spec.name}: {problems}")
        given = dict(channel_servers or {})
        servers = {c.name: _servers(spec, c.name, given) for c in spec.channels}
        work_dir = pipeline_work_dir(spec)
        parts = stages_of(spec, graph, work_dir=work_dir, servers=servers)
        runners = [StageRunner(part, label=f"stage {part.name} of pipeline {spec.name}", pipeline=spec.name)
                   for part in parts]
        return cls(spec, spec_path=spec_path, stages=runners, objects=open_store(spec.checkpoint.storage),
                   work_dir=work_dir, spark_spec=spec.spark,
                   sources=[s for stage in spec.stages for s in stage.sources], spark=spark,
                   source_stages=graph.source_stages, final_stages=graph.final_stages,
                   hold_commits=hold_commits, graph=graph, servers=servers)

    @property
    def parts(self) -> list[Stage]:
        """Every stage as :mod:`barrierflow.pipeline.model` opens it."""
        return [runner.stage for runner in self.stages]

    @property
    def offline(self) -> bool:
        """Whether the pipeline was opened without its embedded broker's address (it cannot run)."""
        return OFFLINE_SERVERS in self.servers.values()

    @property
    def spark(self) -> SparkSession:
        """The run's SparkSession: the one handed in, else built from the spec on first use."""
        if self._spark is None:
            from barrierflow.runtime.session import build_session

            self._spark = build_session(self._spark_spec, app_name=f"barrierflow-{self.name}",
                                        sources=self._sources, work_dirs=[self.spec.work_dir or ""])
        return self._spark

    # -- stages -------------------------------------------------------------------------
    def stage(self, name: str) -> StageRunner:
        """The runner of stage ``name``."""
        return next(r for r in self.stages if r.stage.name == name)

    def is_source(self, runner: StageRunner) -> bool:
        """Whether ``runner``'s stage reads a source (not only channels)."""
        return runner.name in self.source_stages

    def is_final(self, runner: StageRunner) -> bool:
        """Whether ``runner``'s stage writes the pipeline's output (not only channels)."""
        return runner.name in self.final_stages

    def source_ends(self) -> dict[str, dict[str, int]]:
        """Each source stage's bounded source end. Raises UserInputError for an unbounded one."""
        ends = {}
        for runner in self.stages:
            if self.is_source(runner):
                end = source_kind(runner.spec.source).bounded_end(runner.spec.source)
                if end is None:
                    raise UserInputError(f"--until-exhausted needs bounded sources, but stage {runner.name!r} "
                                         "reads an unbounded one; give it an end (e.g. records_per_partition; "
                                         "Kafka topics are read to their end offsets when the run starts) or "
                                         "use --checkpoints/--duration")
                ends[runner.name] = end
        return ends

    def sinks(self, runner: StageRunner, attempt: int) -> list[SinkCommitter]:
        """``runner``'s driver-side sinks (two-phase-commit sinks, or none; one per sink of the
        stage), their commits held when the pipeline holds them and the stage is final."""
        from barrierflow.sinks.factory import build_sinks

        sinks = build_sinks(runner.spec, runner.store, runner.layout, attempt=attempt)
        return [HeldCommits(sink) if self.hold_commits and self.is_final(runner) else sink for sink in sinks]

    def handle(self, runner: StageRunner, coordinator: CheckpointCoordinator | None = None) -> StageHandle:
        """What the pipeline coordinator knows of ``runner`` (``coordinator`` None: the stage
        runs in another process and follows the global checkpoints itself)."""
        return StageHandle(runner.name, runner.store, ControlChannel(runner.layout.control), coordinator,
                           is_source=self.is_source(runner), is_final=self.is_final(runner))

    # -- lease --------------------------------------------------------------------------
    def hold(self, lease: JobLease | None, *, token: FenceToken | None = None) -> None:
        """Write under ``lease`` (acquired by the caller, None: no lease) or, in a stage process
        of ``run --processes``, under its supervisor's ``token``: the fencing number is checked
        before every stage manifest, write-ahead micro-batch of a final stage, 2PC decision and
        global manifest, and recorded with them, so a stalled driver that wakes up after a
        restore elsewhere commits nothing (raises :class:`~barrierflow.lease.FencedOffError`)."""
        self.lease = lease
        self._fence = token if token is not None else (lease.token if lease is not None else None)
        for runner in self.stages:
            runner.store.fence = self._fence

    @property
    def fence(self) -> FenceToken | None:
        """The fencing token writes are checked against (None: no lease held)."""
        return self._fence

    def check_lease(self) -> None:
        """Raise FencedOffError once the lease's heartbeat found it taken over."""
        if self.lease is not None and self.lease.lost is not None:
            self.lease.check("doing anything more")

    def set_attempt(self, attempt: int) -> None:
        """The run's attempt, known after the restore at start (the fencing token records it)."""
        self.attempt = attempt
        if self._fence is not None:
            self._fence.attempt = attempt

    # -- the global records -------------------------------------------------------------
    @property
    def root_store(self) -> CheckpointStore:
        """The pipeline-level store: attempt and abandoned global ids (``_pipeline.json``)."""
        return self.global_store.root

    def global_checkpoints(self) -> list[int]:
        """Ids of completed global checkpoints, not abandoned by a restore, ascending."""
        return self.global_store.completed_ids()

    def cutoffs(self) -> list[AttemptCutoffRecord]:
        """Every restore's attempt cutoffs, oldest first (:meth:`GlobalCheckpointStore.cutoffs`).

        Raises:
            CheckpointCorruptError: the cutoffs file does not parse.
        """
        return self.global_store.cutoffs()

    def has_earlier_run(self) -> bool:
        """Whether a run of this pipeline left local state, global records or an attempt."""
        return any(r.layout.spark_checkpoint.exists() for r in self.stages) or self.global_store.has_records()

    def restore(self, checkpoint_id: int | None = None) -> CutRestoreReport:
        """Restore every stage to global checkpoint ``checkpoint_id`` (None: the latest):
        :func:`barrierflow.recovery.cut_restore.restore_cut` (its errors)."""
        from barrierflow.recovery.cut_restore import restore_cut

        assert isinstance(self.spec, PipelineSpec)
        return restore_cut(self.spec, self.parts, self.global_store, checkpoint_id)

    def restore_initial(self) -> CutRestoreReport:
        """Restore the initial cut (the pipeline completed no global checkpoint):
        :func:`barrierflow.recovery.cut_restore.restore_initial_cut`."""
        from barrierflow.recovery.cut_restore import restore_initial_cut

        assert isinstance(self.spec, PipelineSpec)
        return restore_initial_cut(self.spec, self.parts, self.global_store)

    def load_attempt(self) -> None:
        """The pipeline's current attempt and last completed global checkpoint, from the store."""
        self.set_attempt(self.root_store.attempt())
        self.last_completed = (self.global_checkpoints() or [0])[-1]


def _servers(spec: PipelineSpec, channel: str, given: dict[str, str]) -> str:
    servers = spec.channel(channel).bootstrap_servers()
    if servers is not None:
        return servers
    if channel in given:
        return given[channel]
    raise UserInputError(
        f"channel {channel!r} has bootstrap 'embedded' but no broker address was given; run the pipeline "
        "with 'barrierflow run' (which starts the embedded broker), or give the channel an address or 'env:VAR'")


def forwarded(facade: object, name: str) -> Any:
    """Attribute ``name`` of a job facade (``StreamingJob``, ``StagedPipelineJob``): its running
    pipeline's (``facade.pipeline``), else its cut keeper's (``facade.driver.keeper``).

    Raises:
        AttributeError: neither has it.
    """
    if not name.startswith("__"):
        held = vars(facade)
        for owner in (held.get("pipeline"), getattr(held.get("driver"), "keeper", None)):
            if owner is not None:
                try:
                    return getattr(owner, name)
                except AttributeError:
                    pass
    raise AttributeError(f"{type(facade).__name__!r} object has no attribute {name!r}")
