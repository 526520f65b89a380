"""Who cuts a run: the three cut keepers of the one run loop.

The run loop (:class:`~barrierflow.runtime.pipeline_runner.PipelineRunner`) runs a
:class:`~barrierflow.runtime.running.RunningPipeline` with one
:class:`~barrierflow.runtime.pipeline_runner.CutKeeper`, the only part that depends on where
the cuts come from:

* :class:`OwnCheckpoints` (one stage): a cut is the stage's own checkpoint; its coordinator
  triggers the barriers and its sinks commit when the checkpoint completes (before it starts,
  they finish what a crashed run left in doubt); the store keeps the single-stage layout;
* :class:`GlobalCheckpoints` (several stages): a cut is a global checkpoint of the
  :class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator`; the stages'
  coordinators never trigger and their sinks commit when the global checkpoint completes. A
  stage never simply resumes its own Spark checkpoint, because a batch it replays would write
  its channel records again: every start after the first is a new attempt from the latest
  global checkpoint, whose channel sources skip what older attempts wrote after the restored
  barriers (:mod:`barrierflow.barriers.cutoffs`);
* :class:`FollowedCuts` (one stage of several in a process of its own, ``run --stage``): the
  supervisor's pipeline coordinator cuts; the stage follows its global checkpoints and stops
  when the supervisor asks.

The restore at start of each is not here: it is the running pipeline's
(:meth:`~barrierflow.runtime.running.RunningPipeline.restore_at_start`), called once by the run
loop; a keeper says only whether it follows another process's cuts
(:attr:`~barrierflow.runtime.pipeline_runner.CutKeeper.follows_cuts`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.pipeline_coordinator import PipelineCoordinator, StageHandle
from barrierflow.errors import CheckpointNotFoundError, JobFailedError, UserInputError
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS
from barrierflow.runtime.pipeline_runner import CutKeeper
from barrierflow.runtime.running import RunningPipeline
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.sources.registry import StageRun, reached

if TYPE_CHECKING:
    from barrierflow.transactions.committer import SinkCommitter

log = logging.getLogger(__name__)

__all__ = ["FOLLOW_SECONDS", "FollowedCuts", "GlobalCheckpoints", "OwnCheckpoints"]

#: How often a stage run in its own process looks for newly decided global checkpoints (seconds).
FOLLOW_SECONDS = 0.2


class OwnCheckpoints(CutKeeper):
    """Who cuts a pipeline of one stage: the stage itself (module docstring)."""

    tick_seconds = 0.01
    wait_started = False  # one query: nothing to stagger
    final_progress = False

    @property
    def runner(self) -> StageRunner:
        return self.pipeline.stages[0]

    def source_ends(self) -> dict[str, dict[str, int]]:
        spec = self.runner.spec
        from barrierflow.sources.registry import source_kind

        end = source_kind(spec.source).bounded_end(spec.source)
        if end is None:
            raise UserInputError("--until-exhausted needs a bounded source: a generator with records_per_partition, "
                                 "or a Kafka topic (read to its end offsets when the run starts)")
        return {self.name: end}

    def start(self, *, checkpoints: int | None) -> None:
        sinks = self.pipeline.sinks(self.runner, self.pipeline.attempt)
        self.recover_sinks(sinks)
        coordinator = self.runner.start_coordinator(sinks=sinks, attempt=self.pipeline.attempt,
                                                    spark_version=self.pipeline.spark.version)
        coordinator.trigger_limit = checkpoints

    def stage_run(self, runner: StageRunner) -> StageRun:
        return StageRun(attempt=self.pipeline.attempt)

    def tick(self) -> None:
        """Nothing beyond the stage's own tick: its coordinator is the cut coordinator."""

    @property
    def cutter(self) -> CheckpointCoordinator | None:
        """The stage's coordinator (once started): it triggers the cuts."""
        return self.runner.coordinator

    @property
    def coordinator(self) -> CheckpointCoordinator | None:
        """The coordinator of the cuts: :attr:`cutter`."""
        return self.cutter

    @property
    def completed(self) -> list[Manifest]:
        return self.cutter.completed if self.cutter is not None else []

    @property
    def completed_count(self) -> int:
        return self.cutter.completed_count if self.cutter is not None else 0

    @property
    def failed(self) -> list[FailureRecord]:
        return self.cutter.failed if self.cutter is not None else []

    def at_end(self, cut: Manifest, ends: dict[str, dict[str, int]]) -> bool:
        channel_state = cut.alignment.channel_state_records if cut.alignment is not None else 0
        return reached(cut.barrier_offsets.get(self.runner.spec.source.name), ends[self.name]) and channel_state == 0

    # -- the stage's own checkpoints ----------------------------------------------------
    def recover_sinks(self, sinks: list[SinkCommitter]) -> None:
        """Before starting: finish what a crashed run left in doubt. Pre-committed epochs
        that a completed checkpoint covers are committed; other unfinished ones are aborted
        and their write-ahead batches go into the next epoch (Spark resumes from its local
        checkpoint, so no write-ahead batch is discarded here)."""
        from barrierflow.transactions.two_phase import TwoPhaseCommitSink

        latest = self.runner.store.latest()
        for sink in sinks:
            if isinstance(sink, TwoPhaseCommitSink):
                decisions = sink.plan(latest.checkpoint_id if latest else None, restoring=True)
                sink.apply(decisions)
                for d in decisions:
                    if d.action != "NONE":
                        log.warning("sink %s: %s %s (%s)", d.sink, d.action.lower(), d.transaction_id, d.reason)


def start_stage_coordinator(pipeline: RunningPipeline, runner: StageRunner) -> StageHandle:
    """Start ``runner``'s checkpoint coordinator for global checkpoints (it never triggers:
    barriers come from the pipeline coordinator or in-band; its sink commits wait for the
    global checkpoint); its handle for the pipeline coordinator."""
    coordinator = runner.start_coordinator(sinks=pipeline.sinks(runner, pipeline.attempt), attempt=pipeline.attempt,
                                           spark_version=pipeline.spark.version, commit_on_completion=False)
    coordinator.trigger_limit = 0
    return pipeline.handle(runner, coordinator)


def global_stage_run(pipeline: RunningPipeline, runner: StageRunner) -> StageRun:
    """What ``runner``'s reader is told beyond its spec in a run of global checkpoints: the
    attempt, the last completed global checkpoint, its back-edge topics, cutoffs and slow
    partitions."""
    return StageRun(attempt=pipeline.attempt, last_completed=pipeline.last_completed,
                    back_edge_topics=runner.stage.back_edge_topics,
                    cutoffs=pipeline.global_store.stage_cutoffs(runner.name), rate_factors=runner.stage.rate_factors)


class GlobalCheckpoints(CutKeeper):
    """Who cuts a pipeline of several stages: the pipeline coordinator, whose global checkpoints
    are the cuts (module docstring)."""

    layout = GLOBAL_CHECKPOINTS

    def __init__(self, pipeline: RunningPipeline) -> None:
        super().__init__(pipeline)
        #: The pipeline coordinator, once started.
        self.coordinator: PipelineCoordinator | None = None
        self._at_end: dict[int, bool] = {}

    @property
    def cutter(self) -> PipelineCoordinator | None:
        """The pipeline coordinator (once started): it triggers the global checkpoints."""
        return self.coordinator

    def start(self, *, checkpoints: int | None) -> None:
        pipeline = self.pipeline
        stages = [start_stage_coordinator(pipeline, runner) for runner in pipeline.stages]
        self.coordinator = coordinator = PipelineCoordinator(
            pipeline.name, pipeline.spec.checkpoint, pipeline.objects, stages, attempt=pipeline.attempt,
            fence=pipeline.fence)
        pipeline.set_attempt(pipeline.attempt)
        coordinator.start()
        coordinator.trigger_limit = checkpoints

    def stage_run(self, runner: StageRunner) -> StageRun:
        return global_stage_run(self.pipeline, runner)

    def tick(self) -> None:
        assert self.coordinator is not None
        self.coordinator.tick()

    @property
    def completed(self) -> list[GlobalManifest]:
        return self.coordinator.completed if self.coordinator is not None else []

    @property
    def failed(self) -> list[GlobalFailure]:
        return self.coordinator.failed if self.coordinator is not None else []

    def at_end(self, cut: GlobalManifest, ends: dict[str, dict[str, int]]) -> bool:
        """Whether global checkpoint ``cut`` has the source stages' barriers at their sources'
        ``ends`` and no channel state in any stage (records in flight at an unaligned snapshot
        are processed in the next epoch, so their output is not covered yet). Decided once per
        cut, from its stages' manifests, when the run loop first asks (the tick it completed);
        the run's retention of ``checkpoint.retained`` deletes them later. A cut already deleted
        by then (several completed at once) is not at the end."""
        known = self._at_end.get(cut.checkpoint_id)
        if known is None:
            try:
                known = all(reached(self.pipeline.stage(name).store.get(cut.checkpoint_id).barrier_offsets.get(
                    self.pipeline.stage(name).spec.source.name), end) for name, end in ends.items()) \
                    and all(part.channel_state_records == 0 for part in cut.stages.values())
            except CheckpointNotFoundError:
                known = False
            self._at_end[cut.checkpoint_id] = known
        return known


class FollowedCuts(CutKeeper):
    """One stage of several in a process of its own (``run --processes``, ``run --stage``): the
    supervisor's pipeline coordinator cuts; this stage follows its global checkpoints. A final
    stage commits its sinks up to each completed one and aborts each failed one, in order
    (:meth:`follow`), every :data:`FOLLOW_SECONDS` and once more when the stop is requested;
    the run stops when ``stop_requested`` returns the last completed global checkpoint
    (:attr:`stop`) and fails when ``alive`` turns False."""

    final_progress = False
    follows_cuts = True

    def __init__(self, pipeline: RunningPipeline, stage: str, *, stop_requested: Callable[[], int | None],
                 started: Callable[[], None], alive: Callable[[], bool]) -> None:
        super().__init__(pipeline)
        self.runner = pipeline.stage(stage)
        self.final = pipeline.is_final(self.runner)
        self._stop_requested, self._started, self._alive = stop_requested, started, alive
        self.decided = 0
        self.next_follow = 0.0
        #: The last completed global checkpoint once the supervisor asked the stage to stop.
        self.stop: int | None = None

    @property
    def runners(self) -> list[StageRunner]:
        return [self.runner]

    @property
    def cutter(self) -> None:
        """None: this process triggers no cut (the supervisor's coordinator does)."""
        return None

    def source_ends(self) -> dict[str, dict[str, int]]:
        raise UserInputError("a stage process runs until its supervisor stops it; --until-exhausted is the "
                             "supervisor's ('barrierflow run SPEC --processes --until-exhausted')")

    def start(self, *, checkpoints: int | None) -> None:
        self.decided = self.pipeline.last_completed  # loaded by the restore at start (``follows_cuts``)
        start_stage_coordinator(self.pipeline, self.runner)

    def stage_run(self, runner: StageRunner) -> StageRun:
        return global_stage_run(self.pipeline, runner)

    def queries_started(self) -> None:
        self._started()

    def tick(self) -> None:
        stop = self._stop_requested()
        if self.final and (stop is not None or time.monotonic() >= self.next_follow):
            self.next_follow = time.monotonic() + FOLLOW_SECONDS
            self.decided = self.follow(self.decided)
        self.stop = stop
        if stop is None and not self._alive():
            raise JobFailedError(f"stage {self.runner.name} of pipeline {self.name}: its supervisor (the pipeline "
                                 "coordinator) is gone; the pipeline restarts from its latest global checkpoint "
                                 "when it is run again")

    def follow(self, decided: int) -> int:
        """Commit (complete) or abort (failed) the stage's sinks for the global checkpoints after
        ``decided``, in order, stopping at the first one still undecided; returns the last
        decided id."""
        coordinator = self.runner.coordinator
        assert coordinator is not None
        highest = max([decided, *(m.checkpoint_id for m in coordinator.completed), *coordinator.pending.keys()])
        for cid in range(decided + 1, highest + 1):
            status = self.pipeline.global_store.status(cid)
            if status == "completed":
                if not coordinator.commit_sinks(cid):
                    log.warning("global checkpoint %d: stage %s did not complete it in this run; its sinks commit "
                                "it when the stage recovers", cid, self.runner.name)
            elif status == "failed":
                coordinator.abort_sinks(cid)
            else:
                return cid - 1
        return highest

    @property
    def completed(self) -> list[Manifest]:
        return self.runner.coordinator.completed if self.runner.coordinator is not None else []

    @property
    def failed(self) -> list[FailureRecord]:
        return self.runner.coordinator.failed if self.runner.coordinator is not None else []

    def at_end(self, cut: Manifest, ends: dict[str, dict[str, int]]) -> bool:
        return False  # never asked: source_ends refuses
