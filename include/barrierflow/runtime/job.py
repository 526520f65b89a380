"""A pipeline of one stage run as a job: a thin facade for tests and benchmarks. It opens a
:class:`~barrierflow.runtime.running.RunningPipeline` of one stage (an injected SparkSession, store
or layout) cut by its own checkpoints (:class:`~barrierflow.runtime.cuts.OwnCheckpoints`), runs it
through the one run loop (:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`: its
result and errors) and names what tests read of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from barrierflow.runtime.cuts import OwnCheckpoints
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult
from barrierflow.runtime.progress import Progress
from barrierflow.runtime.running import RunningPipeline
from barrierflow.spec.models import StageSpec

__all__ = ["Progress", "RunResult", "StreamingJob"]


class StreamingJob:
    """One pipeline of one stage (module docstring); ``hold_commits``: its sink pre-commits every
    epoch but commits none (an upgrade's canary)."""

    def __init__(self, spec: StageSpec, *, spec_path: str = "<spec>", spark: Any = None,
                 checkpoint_objects: Any = None, layout: Any = None, hold_commits: bool = False) -> None:
        self.pipeline = RunningPipeline.of_stage(spec, spec_path=spec_path, spark=spark, layout=layout,
                                                 checkpoint_objects=checkpoint_objects, hold_commits=hold_commits)
        self.driver = PipelineRunner(OwnCheckpoints(self.pipeline))
        self.runner = self.pipeline.stages[0]
        self.store, self.layout, self.event_time = self.runner.store, self.runner.layout, self.runner.event_time
        self.spec, self.restore_at_start = self.pipeline.spec, self.pipeline.restore_at_start

    @property
    def query(self) -> Any:  # None before the run starts it, as the coordinator
        return self.runner.query

    @property
    def coordinator(self) -> Any:
        return self.runner.coordinator

    @property
    def spark(self) -> Any:
        return self.pipeline.spark

    @property
    def lease(self) -> Any:
        return self.pipeline.lease

    def run(self, *, duration: float | None = None, checkpoints: int | None = None,
            progress: Callable[[Progress], None] | None = None, progress_every: float = 1.0,
            on_tick: Callable[[StreamingJob], None] | None = None, until_exhausted: bool = False,
            lease_check: bool = True, until: Callable[[StreamingJob], bool] | None = None) -> RunResult:
        """Run until ``duration``, ``checkpoints``, ``until_exhausted`` or ``until`` (asked every tick)
        says so; with ``lease_check`` under the pipeline's lease (``barrierflow run`` takes it itself)."""
        return self.driver.run_held(lease_check, duration=duration, checkpoints=checkpoints,
                                    until_exhausted=until_exhausted, progress=progress, progress_every=progress_every,
                                    on_tick=(lambda: on_tick(self)) if on_tick is not None else None,
                                    until=(lambda: until(self)) if until is not None else None)
