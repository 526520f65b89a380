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
from barrierflow.checkpointing.global_store import SingleStageCuts
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline


@dataclass(frozen=True)
class CheckpointListing:
    """A pipeline's cuts, ascending by id: completed ones (their manifests carry each stage's
    mode, alignment, sync and async times and channel-state records), failed ones, and the ids
    a restore abandoned.

    Attributes:
        stages: the stages' names (one: the pipeline's).
        cuts: the completed cuts (several stages: abandoned ones too, flagged by ``abandoned``).
        failed_cuts: their failure records.
        manifests, failures: one stage only (else None): its own manifests and failure records,
            the cuts in full (kind, barrier batch, bytes), as ``checkpoints list`` prints them.
    """

    pipeline: str
    storage: str
    stages: tuple[str, ...]
    cuts: list[GlobalManifest]
    failed_cuts: list[GlobalFailure]
    abandoned: list[int]
    attempt: int
    manifests: list[Manifest] | None = None
    failures: list[FailureRecord] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints list --json``: for one stage its manifests and failure
        records (``completed``, ``failed``); for several the global ones, with ``attempt``
        and ``abandoned``. Both carry ``stages``."""
        if self.manifests is not None and self.failures is not None:
            return {"pipeline": self.pipeline, "storage": self.storage, "stages": list(self.stages),
                    "completed": [m.model_dump(mode="json") for m in self.manifests],
                    "failed": [f.model_dump(mode="json") for f in self.failures]}
        return {"pipeline": self.pipeline, "storage": self.storage, "stages": list(self.stages),
                "attempt": self.attempt, "abandoned": self.abandoned,
                "completed": [m.model_dump(mode="json") for m in self.cuts],
                "failed": [f.model_dump(mode="json") for f in self.failed_cuts]}


def listing(pipeline: OpenedPipeline) -> CheckpointListing:
    """The listing of an opened pipeline (see :func:`list_checkpoints`)."""
    names = tuple(s.name for s in pipeline.stages)
    cuts = pipeline.cuts
    if isinstance(cuts, SingleStageCuts):
        manifests, failures = cuts.store.completed(), cuts.store.failures()
        return CheckpointListing(pipeline.name, pipeline.storage, names, [cuts.cut_of(m) for m in manifests],
                                 cuts.failures(), cuts.abandoned(), cuts.attempt(), manifests, failures)
    return CheckpointListing(pipeline.name, pipeline.storage, names, cuts.all_manifests(), cuts.failures(),
                             cuts.abandoned(), cuts.attempt())


def list_checkpoints(spec_path: str | os.PathLike[str]) -> CheckpointListing:
    """Read every completed cut and failure record of the pipeline at ``spec_path``.

    Raises:
        SpecError: the spec does not load. CheckpointCorruptError: a global record does not
            parse. StorageError: the store cannot be read.
    """
    return listing(open_pipeline(spec_path))


@dataclass(frozen=True)
class CheckpointView:
    """One cut: its (for one stage: derived) global manifest and every stage's manifest."""

    manifest: GlobalManifest
    stages: dict[str, Manifest]
    single_stage: bool = False

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints show --json``: one stage: its manifest; several: the
        global manifest with ``stage_manifests``."""
        if self.single_stage:
            [manifest] = self.stages.values()
            return manifest.model_dump(mode="json")
        return {**self.manifest.model_dump(mode="json"),
                "stage_manifests": {name: m.model_dump(mode="json") for name, m in self.stages.items()}}


def view(pipeline: OpenedPipeline, checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` of an opened pipeline (see :func:`show_checkpoint`)."""
    manifest = pipeline.cuts.get(checkpoint_id)
    return CheckpointView(manifest, {s.name: s.store.get(checkpoint_id) for s in pipeline.stages},
                          pipeline.single_stage)


def show_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` and each stage's manifest.

    Raises:
        CheckpointNotFoundError: it did not complete (or does not exist); the message says
            which it was. CheckpointCorruptError: its manifest does not parse.
    """
    return view(open_pipeline(spec_path), checkpoint_id)
