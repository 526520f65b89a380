"""The pipeline an operation works on: its spec, where the spec came from, its checkpoint store."""

from __future__ import annotations

import os
from dataclasses import dataclass

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec.loader import load_any_spec, load_spec
from barrierflow.spec.models import PipelineSpec
from barrierflow.spec.stages import StagedPipelineSpec


@dataclass(frozen=True)
class Pipeline:
    spec: PipelineSpec
    spec_path: str
    store: CheckpointStore

    @property
    def name(self) -> str:
        return self.spec.name


def open_pipeline(spec_path: str | os.PathLike[str]) -> Pipeline:
    """Load the spec at ``spec_path`` and open its checkpoint store (nothing is read from it
    yet). Raises SpecError for a spec that does not load."""
    spec = load_spec(spec_path)
    return Pipeline(spec, str(spec_path), CheckpointStore.for_spec(spec))


def is_multi_stage(spec_path: str | os.PathLike[str]) -> bool:
    """Whether the spec at ``spec_path`` is a pipeline of several stages. Raises SpecError for
    a spec that does not load (single- or multi-stage)."""
    return isinstance(load_any_spec(spec_path), StagedPipelineSpec)
