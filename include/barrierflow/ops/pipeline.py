"""The pipeline an operation works on.

Every operation of :mod:`barrierflow.ops` opens the pipeline with
:func:`barrierflow.pipeline.model.open_pipeline`: the spec loaded once, single- or
multi-stage, with its stages and its cuts (:class:`~barrierflow.pipeline.model.OpenedPipeline`).

:func:`open_pipeline` is the single-stage view the batch side reads (``ops/batch.py``,
``ops/quality.py``: rollups, stream-vs-batch reconciliation and data quality of a Parquet
output): it raises SpecError for a spec of several stages, whose batch side is being built
(final stages). Once that lands it becomes the model's as well.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec.loader import load_spec
from barrierflow.spec.models import PipelineSpec


@dataclass(frozen=True)
class Pipeline:
    """A single-stage spec, where it came from, and its checkpoint store."""

    spec: PipelineSpec
    spec_path: str
    store: CheckpointStore

    @property
    def name(self) -> str:
        return self.spec.name


def open_pipeline(spec_path: str | os.PathLike[str]) -> Pipeline:
    """Load the single-stage spec at ``spec_path`` and open its checkpoint store (nothing is
    read from it yet). Raises SpecError for a spec that does not load, or has several stages."""
    spec = load_spec(spec_path)
    return Pipeline(spec, str(spec_path), CheckpointStore.for_spec(spec))
