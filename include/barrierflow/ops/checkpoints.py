"""List or show a pipeline's checkpoints (``barrierflow checkpoints list|show``).

For a multi-stage spec :func:`list_global_checkpoints` lists the global checkpoints (see
:mod:`barrierflow.checkpointing.global_manifest`), each with its stages' parts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.errors import UserInputError
from barrierflow.ops.pipeline import open_pipeline
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.stages import StagedPipelineSpec
from barrierflow.storage import open_store


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


@dataclass(frozen=True)
class GlobalCheckpointListing:
    """The global checkpoints of a multi-stage pipeline, ascending by id: completed ones
    (their manifests carry each stage's mode, alignment, sync and async times and
    channel-state records), failed ones, and the ids a restore abandoned (listed in
    ``completed`` too if they had completed, flagged by ``abandoned``)."""

    pipeline: str
    storage: str
    stages: tuple[str, ...]
    completed: list[GlobalManifest]
    failed: list[GlobalFailure]
    abandoned: list[int]
    attempt: int

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "storage": self.storage, "stages": list(self.stages),
                "attempt": self.attempt, "abandoned": self.abandoned,
                "completed": [m.model_dump(mode="json") for m in self.completed],
                "failed": [f.model_dump(mode="json") for f in self.failed]}


def list_global_checkpoints(spec_path: str | os.PathLike[str]) -> GlobalCheckpointListing:
    """Read every global manifest and failure record of the multi-stage spec at ``spec_path``.

    Raises:
        SpecError: the spec does not load. UserInputError: the spec is single-stage (use
            :func:`list_checkpoints`). CheckpointCorruptError: a global record does not parse.
        StorageError: the store cannot be read.
    """
    spec = load_any_spec(spec_path)
    if not isinstance(spec, StagedPipelineSpec):
        raise UserInputError(f"{spec_path} is a single-stage spec; its checkpoints are listed by list_checkpoints")
    store = GlobalCheckpointStore(open_store(spec.checkpoint.storage), spec.name)
    return GlobalCheckpointListing(spec.name, store.uri, tuple(s.name for s in spec.stages), store.all_manifests(),
                                   store.failures(), store.abandoned(), store.attempt())
