"""How far a pipeline got, cheaply enough to be polled (the checkpoints asset's watcher and the
supervision of the Airflow side; the output assets poll
:func:`barrierflow.ops.batch.newest_output_epoch`), whatever its shape.

A pipeline's checkpoints are its cuts: for one stage, its own checkpoints; for several, the
global ones (completed when the global manifest is stored, every stage's snapshot collected,
and no restore abandoned it). Each function takes the spec's path or a pipeline already opened
(:func:`barrierflow.pipeline.model.open_pipeline`), so a caller that needs more than one
answer loads the spec once.
"""

from __future__ import annotations

import os
from datetime import datetime

from barrierflow.pipeline.model import OpenedPipeline, open_pipeline

__all__ = ["OpenedPipeline", "newest_completed_checkpoint", "newest_completion_time", "open_pipeline"]

PipelineRef = str | os.PathLike[str] | OpenedPipeline


def _opened(pipeline: PipelineRef) -> OpenedPipeline:
    return pipeline if isinstance(pipeline, OpenedPipeline) else open_pipeline(pipeline)


def newest_completed_checkpoint(pipeline: PipelineRef) -> int | None:
    """The id of the newest completed cut (manifest stored, not abandoned), or None. Lists
    keys; reads no manifest."""
    ids = _opened(pipeline).cuts.completed_ids()
    return ids[-1] if ids else None


def newest_completion_time(pipeline: PipelineRef) -> datetime | None:
    """Completion time (timezone-aware) of the newest completed cut whose manifest reads, or
    None; for several stages its global manifest's time (when the last stage's snapshot was
    collected)."""
    newest = _opened(pipeline).newest_cut()
    return newest.completion_time if newest is not None else None
