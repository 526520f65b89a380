"""Promote a completed cut to a savepoint (``barrierflow savepoint``), in every stage."""

from __future__ import annotations

import os

from barrierflow.ops.checkpoints import CheckpointView, view
from barrierflow.pipeline.model import open_pipeline
from barrierflow.retention.savepoint import take_savepoint
from barrierflow.verification.global_cut import refuse_unverifiable_cut, unreachable_inputs


def savepoint(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> CheckpointView:
    """Promote cut ``checkpoint_id`` (None: the latest completed) to a savepoint: the cut is
    verified first (several stages: as one cut; every stage's checkpoint is verified by the
    promotion itself), then every stage's checkpoint becomes a savepoint, which retention
    never deletes (nor, of several stages, the global checkpoint). Running it again after an
    interruption finishes the promotion. Returns the cut with every stage's new manifest.

    Raises:
        CheckpointNotFoundError: no (such) completed cut.
        CheckpointCorruptError: it fails verification (the message names the stage and check).
    """
    pipeline = open_pipeline(spec_path)
    checkpoint_id = pipeline.completed_cut(checkpoint_id)
    # the cut's own checks; each stage's are the promotion's (take_savepoint)
    refuse_unverifiable_cut(pipeline.cuts, pipeline.stages, checkpoint_id, "become a savepoint")
    for stage in pipeline.stages:
        take_savepoint(stage.spec, stage.store, checkpoint_id, starts=unreachable_inputs(stage))
    return view(pipeline, checkpoint_id)
