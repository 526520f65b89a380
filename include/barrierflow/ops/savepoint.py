"""Promote a completed checkpoint to a savepoint (``barrierflow savepoint``)."""

from __future__ import annotations

import os

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.ops.pipeline import open_pipeline
from barrierflow.retention.savepoint import take_savepoint


def savepoint(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> Manifest:
    """Promote ``checkpoint_id`` (None: the latest completed) after verifying it; returns its
    manifest. Raises CheckpointNotFoundError or CheckpointCorruptError."""
    pipeline = open_pipeline(spec_path)
    return take_savepoint(pipeline.spec, pipeline.store, checkpoint_id=checkpoint_id)
