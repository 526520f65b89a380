"""List or show a pipeline's checkpoints (``barrierflow checkpoints list|show``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.ops.pipeline import open_pipeline


@dataclass(frozen=True)
class CheckpointListing:
    """Every readable completed manifest and every failure record, ascending by id."""

    pipeline: str
    storage: str
    completed: list[Manifest]
    failed: list[FailureRecord]

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "storage": self.storage,
                "completed": [m.model_dump(mode="json") for m in self.completed],
                "failed": [f.model_dump(mode="json") for f in self.failed]}


def list_checkpoints(spec_path: str | os.PathLike[str]) -> CheckpointListing:
    """Raises SpecError (bad spec) or StorageError (store unreadable)."""
    pipeline = open_pipeline(spec_path)
    return CheckpointListing(pipeline.name, pipeline.store.uri, pipeline.store.completed(), pipeline.store.failures())


def show_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> Manifest:
    """The manifest of ``checkpoint_id``. Raises CheckpointNotFoundError, CheckpointCorruptError."""
    return open_pipeline(spec_path).store.get(checkpoint_id)
