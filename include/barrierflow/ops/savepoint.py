"""Promote a completed cut to a savepoint (``barrierflow savepoint``), in every stage."""

from __future__ import annotations

import os

from barrierflow.pipeline.cut_view import CheckpointView, view
from barrierflow.pipeline.model import open_pipeline
from barrierflow.retention.savepoint import promote_cut


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
    return view(pipeline, promote_cut(pipeline, checkpoint_id))
