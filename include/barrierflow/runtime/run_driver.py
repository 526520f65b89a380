"""The run driver of an opened pipeline: the one place that says who cuts.

:func:`open_driver` gives every pipeline the one run loop
(:class:`~barrierflow.runtime.pipeline_runner.PipelineRunner`) over its stages; only the cut
keeper and where the stages run depend on the shape: one stage is cut by its own checkpoints
(:class:`~barrierflow.runtime.job.StageCuts`), several by the pipeline coordinator's global
checkpoints (:class:`~barrierflow.runtime.pipeline.GlobalCuts`), every stage in this process
(:class:`~barrierflow.runtime.pipeline_runner.LocalStages`); with ``run --processes`` the
pipeline coordinator of this process cuts (:class:`~barrierflow.runtime.stage_processes.SupervisedCuts`)
and every stage runs in a process of its own
(:class:`~barrierflow.runtime.stage_processes.StageProcesses`), each following those cuts
(:class:`~barrierflow.runtime.pipeline.FollowedCuts`, :func:`open_stage_process_driver`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.pipeline.layout import OWN_CHECKPOINTS
from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.runtime.job import StreamingJob
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.pipeline_runner import PipelineRunner
from barrierflow.runtime.stage_processes import process_driver

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["channel_servers", "open_driver", "open_stage_process_driver"]


def open_driver(pipeline: OpenedPipeline, *, channel_servers: Mapping[str, str] | None = None,
                processes: bool = False, spark: SparkSession | None = None,
                hold_commits: bool = False) -> PipelineRunner:
    """The run driver of ``pipeline`` (``channel_servers``: the addresses of channels whose
    ``bootstrap`` is ``embedded``); with ``processes`` (``run --processes``), every stage in a
    process of its own (:func:`barrierflow.runtime.stage_processes.process_driver`). ``spark``:
    the session to run in (None: built from the spec); ``hold_commits``: the final sinks
    pre-commit every epoch but commit none (an upgrade's canary; not with ``processes``).

    Raises:
        UserInputError: a stage cannot be derived, or an embedded channel has no address;
            ``processes`` for a pipeline of one stage, or with ``hold_commits``.
    """
    if processes:
        pipeline.refuse_stage_processes("--processes")
        if hold_commits:  # the stage processes build their own sinks: holding would be ignored
            raise UserInputError(f"{pipeline.spec_path}: a canary (held commits) runs its stages in one process; "
                                 "run it without --processes")
    if pipeline.layout is OWN_CHECKPOINTS:  # the one shape decision of a run: which job runs the stages
        (stage,) = pipeline.stages
        return StreamingJob(stage.spec, spec_path=pipeline.spec_path, spark=spark, hold_commits=hold_commits).driver
    servers = dict(channel_servers or {})
    job = StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path, spark=spark, channel_servers=servers,
                            hold_commits=hold_commits)
    return process_driver(job, servers=servers) if processes else job.driver


@contextmanager
def channel_servers(pipeline: OpenedPipeline) -> Iterator[tuple[str | None, dict[str, str]]]:
    """While open, the embedded broker on the pipeline's data dir runs when a channel of
    ``pipeline`` lives there: yields its address (None: no channel does) and the channel name
    -> address map :func:`open_driver` takes.

    Raises:
        EmbeddedBrokerError: the embedded broker did not start.
    """
    from barrierflow.kafka_io.embedded_broker import data_dir_for, embedded_broker

    if not any(c.is_embedded for c in pipeline.channels):
        yield None, {}
        return
    with embedded_broker(data_dir_for(pipeline.work_dir)) as address:
        yield address, {c.name: address for c in pipeline.channels if c.is_embedded}


def open_stage_process_driver(pipeline: OpenedPipeline, stage: str, *,
                              channel_servers: Mapping[str, str] | None = None) -> StagedPipelineJob:
    """The job of one stage process of ``run --processes`` (``run SPEC --stage NAME``): the
    pipeline's stages, of which the process runs ``stage`` following its supervisor's cuts.

    Raises:
        UserInputError: the pipeline is one stage (no stage processes), or has no such stage.
    """
    pipeline.refuse_stage_processes("--stage")
    pipeline.stage(stage)  # UserInputError naming the stages
    return StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path, channel_servers=dict(channel_servers or {}))
