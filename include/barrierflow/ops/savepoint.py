"""Promote a completed cut to a savepoint (``barrierflow savepoint``), in every stage."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.pipeline.cut_view import CheckpointView, view
from barrierflow.pipeline.model import open_pipeline
from barrierflow.retention.savepoint import promote_cut


@dataclass(frozen=True)
class Savepoint(CheckpointView):
    """The cut just made a savepoint: a :class:`CheckpointView` whose :meth:`as_dict` is the
    document of ``savepoint --json``."""

    def as_dict(self) -> dict[str, Any]:
        """``pipeline``, ``noun``, ``savepoint`` (the cut's id) and ``stages``: each stage's
        Spark batch of the savepoint."""
        return {"pipeline": self.manifest.pipeline, "noun": self.noun, "savepoint": self.checkpoint_id,
                "stages": {name: m.spark_batch_id for name, m in self.stages.items()}}


def savepoint(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> Savepoint:
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
    cut = view(pipeline, promote_cut(pipeline, checkpoint_id))
    return Savepoint(cut.manifest, cut.stages, cut.noun, cut.starting_offsets)
