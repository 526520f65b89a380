"""The run driver of an opened pipeline: the one place that says who cuts.

:func:`open_driver` gives every pipeline the one run loop
(:class:`~barrierflow.runtime.pipeline_runner.PipelineRunner`) over its stages; only the cut
keeper depends on the shape: one stage is cut by its own checkpoints
(:class:`~barrierflow.runtime.job.StageCuts`), several by the pipeline coordinator's global
checkpoints (:class:`~barrierflow.runtime.pipeline.GlobalCuts`).
"""

from __future__ import annotations

from collections.abc import Mapping

from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.runtime.job import StreamingJob
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.pipeline_runner import PipelineRunner
from barrierflow.spec.models import PipelineSpec

__all__ = ["open_driver", "open_stage_process_driver"]


def open_driver(pipeline: OpenedPipeline, *, channel_servers: Mapping[str, str] | None = None) -> PipelineRunner:
    """The run driver of ``pipeline`` (``channel_servers``: the addresses of channels whose
    ``bootstrap`` is ``embedded``).

    Raises:
        UserInputError: a stage cannot be derived, or an embedded channel has no address.
    """
    if isinstance(pipeline.spec, PipelineSpec):
        return StreamingJob(pipeline.spec, spec_path=pipeline.spec_path).driver
    return StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path,
                             channel_servers=dict(channel_servers or {})).driver


def open_stage_process_driver(pipeline: OpenedPipeline, stage: str, *,
                              channel_servers: Mapping[str, str] | None = None) -> StagedPipelineJob:
    """The job of one stage process of ``run --processes`` (``run SPEC --stage NAME``): the
    pipeline's stages, of which the process runs ``stage`` following its supervisor's cuts.

    Raises:
        UserInputError: the pipeline is one stage (no stage processes), or has no such stage.
    """
    pipeline.refuse_stage_processes("--stage")
    pipeline.stage(stage)  # UserInputError naming the stages
    assert not isinstance(pipeline.spec, PipelineSpec)  # refused above
    return StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path, channel_servers=dict(channel_servers or {}))
