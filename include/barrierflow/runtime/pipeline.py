"""A pipeline of several stages run as a job: a thin facade for tests and benchmarks. It opens a
:class:`~barrierflow.runtime.running.RunningPipeline` of every stage (one SparkSession; channels at
``channel_servers`` when their ``bootstrap`` is ``embedded``) cut by the pipeline coordinator's global
checkpoints (:class:`~barrierflow.runtime.cuts.GlobalCheckpoints`), runs it through the one run loop or
one stage following its supervisor's cuts (:meth:`StagedPipelineJob.run_stage`), and names what tests
read of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.pipeline.model import OFFLINE_SERVERS
from barrierflow.runtime.cuts import GlobalCheckpoints
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult
from barrierflow.runtime.progress import Progress
from barrierflow.runtime.running import RunningPipeline
from barrierflow.spec.stages import PipelineSpec

__all__ = ["StagedPipelineJob"]


class StagedPipelineJob:
    """One pipeline of several stages (module docstring); ``hold_commits``: the final stages'
    sinks pre-commit every epoch but commit none (an upgrade's canary)."""

    def __init__(self, spec: PipelineSpec, *, spec_path: str = "<spec>", spark: Any = None,
                 channel_servers: dict[str, str] | None = None, hold_commits: bool = False) -> None:
        self.pipeline = RunningPipeline.of_stages(spec, spec_path=spec_path, spark=spark,
                                                  channel_servers=channel_servers, hold_commits=hold_commits)
        self.driver = PipelineRunner(GlobalCheckpoints(self.pipeline))
        p = self.pipeline
        self.spec, self.stages, self.graph, self.objects = p.spec, p.stages, p.graph, p.objects
        self.work_dir, self.global_store, self.global_checkpoints = p.work_dir, p.global_store, p.global_checkpoints
        self.hold, self.stage_job, self.stage_run = p.hold, p.stage, self.driver.keeper.stage_run

    @classmethod
    def offline(cls, spec: PipelineSpec, *, spec_path: str = "<spec>") -> StagedPipelineJob:
        """Opened beside a run, to read its stores: embedded channels get no address; :meth:`run` refuses."""
        return cls(spec, spec_path=spec_path, channel_servers={c.name: OFFLINE_SERVERS for c in spec.channels})

    @property
    def spark(self) -> Any:
        return self.pipeline.spark

    def run(self, *, checkpoints: int | None = None, duration: float | None = None, until_exhausted: bool = False,
            progress: Callable[[Progress], None] | None = None, progress_every: float = 1.0) -> RunResult:
        """The one run loop with global checkpoints (:meth:`PipelineRunner.run`, its errors)."""
        return self.driver.run(checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted,
                               progress=progress, progress_every=progress_every)

    def run_stage(self, name: str, *, stop_requested: Callable[[], int | None], **options: Any) -> list[Manifest]:
        """Run stage ``name`` following its supervisor's cuts
        (:func:`barrierflow.runtime.stage_processes.run_stage`, ``options`` its)."""
        from barrierflow.runtime.stage_processes import run_stage

        return run_stage(self.pipeline, name, stop_requested=stop_requested, **options)

