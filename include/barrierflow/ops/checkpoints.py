"""List or show a pipeline's checkpoints (``barrierflow checkpoints list|show``), whatever its shape.

A pipeline's checkpoints are its cuts (see :mod:`barrierflow.pipeline.model`): for one stage,
its own checkpoints; for several, the global checkpoints (see
:mod:`barrierflow.checkpointing.global_manifest`), each with every stage's part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline


@dataclass(frozen=True)
class CheckpointListing:
    """A pipeline's cuts, ascending by id: completed ones (their manifests carry each stage's
    mode, alignment, sync and async times and channel-state records), failed ones, the ids a
    restore abandoned, and each stage's own checkpoints in full.

    Attributes:
        noun: how messages name a cut (:attr:`OpenedPipeline.cut_noun`).
        cuts: the completed cuts (abandoned ones too, flagged by ``abandoned``).
        failed_cuts: their failure records.
        stages: each stage's own manifests and failure records, in the spec's order (one stage:
            the pipeline's): the cuts' parts in full (kind, barrier batch, bytes).
    """

    pipeline: str
    storage: str
    noun: str
    cuts: list[GlobalManifest]
    failed_cuts: list[GlobalFailure]
    abandoned: list[int]
    attempt: int
    stages: dict[str, StageCheckpoints]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints list --json``, one shape for every pipeline: ``pipeline``,
        ``storage``, ``noun``, ``attempt``, ``abandoned``, the cuts (``completed``, ``failed``)
        and under ``stages`` each stage's own manifests and failure records (``completed``,
        ``failed``)."""
        return {"pipeline": self.pipeline, "storage": self.storage, "noun": self.noun,
                "attempt": self.attempt, "abandoned": self.abandoned,
                "completed": [m.model_dump(mode="json") for m in self.cuts],
                "failed": [f.model_dump(mode="json") for f in self.failed_cuts],
                "stages": {name: stage.as_dict() for name, stage in self.stages.items()}}


@dataclass(frozen=True)
class StageCheckpoints:
    """One stage's own checkpoints: its manifests and failure records, ascending by id."""

    completed: list[Manifest]
    failed: list[FailureRecord]

    def manifest(self, checkpoint_id: int) -> Manifest | None:
        """Its manifest of cut ``checkpoint_id`` (None: it has none, e.g. deleted by retention)."""
        return next((m for m in self.completed if m.checkpoint_id == checkpoint_id), None)

    def as_dict(self) -> dict[str, Any]:
        return {"completed": [m.model_dump(mode="json") for m in self.completed],
                "failed": [f.model_dump(mode="json") for f in self.failed]}


def listing(pipeline: OpenedPipeline) -> CheckpointListing:
    """The listing of an opened pipeline (see :func:`list_checkpoints`)."""
    cuts = pipeline.cuts
    stages = {s.name: StageCheckpoints(s.store.completed(), s.store.failures()) for s in pipeline.stages}
    return CheckpointListing(pipeline.name, pipeline.storage, pipeline.cut_noun, cuts.all_manifests(),
                             cuts.failures(), cuts.abandoned(), cuts.attempt(), stages)


def list_checkpoints(spec_path: str | os.PathLike[str]) -> CheckpointListing:
    """Read every completed cut and failure record of the pipeline at ``spec_path``.

    Raises:
        SpecError: the spec does not load. CheckpointCorruptError: a global record does not
            parse. StorageError: the store cannot be read.
    """
    return listing(open_pipeline(spec_path))


@dataclass(frozen=True)
class CheckpointView:
    """One cut: its global manifest (for one stage: derived from its checkpoint) and every
    stage's manifest; ``noun`` names the cut (:attr:`OpenedPipeline.cut_noun`)."""

    manifest: GlobalManifest
    stages: dict[str, Manifest]
    noun: str

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints show --json``, one shape for every pipeline: the cut's
        global manifest (``checkpoint_id``, ``attempt``, times) with ``noun``, and under
        ``stages`` each stage's ``part`` of the cut (batch, mode, alignment and sync/async
        times) and its ``manifest`` in full."""
        document = self.manifest.model_dump(mode="json")
        parts = document.pop("stages")
        return {**document, "noun": self.noun,
                "stages": {name: {"part": parts.get(name), "manifest": m.model_dump(mode="json")}
                           for name, m in self.stages.items()}}


def view(pipeline: OpenedPipeline, checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` of an opened pipeline (see :func:`show_checkpoint`)."""
    manifest = pipeline.cuts.get(checkpoint_id)
    return CheckpointView(manifest, {s.name: s.store.get(checkpoint_id) for s in pipeline.stages},
                          pipeline.cut_noun)


def show_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` and each stage's manifest.

    Raises:
        CheckpointNotFoundError: it did not complete (or does not exist); the message says
            which it was. CheckpointCorruptError: its manifest does not parse.
    """
    return view(open_pipeline(spec_path), checkpoint_id)
