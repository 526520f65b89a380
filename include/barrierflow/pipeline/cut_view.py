"""One cut of an opened pipeline as the front doors show it (``checkpoints show``, ``savepoint``).

:class:`CheckpointView` is the cut's global manifest (for one stage: derived from its checkpoint),
every stage's manifest, per Kafka source, its barrier offsets in the form a
``starting_offsets`` takes, and the cut's lakehouse table versions
(:mod:`barrierflow.pipeline.table_cut`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.global_manifest import GlobalManifest
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.pipeline.table_cut import CutTable, cut_table_versions
from barrierflow.pipeline.words import words

if TYPE_CHECKING:
    from barrierflow.pipeline.model import OpenedPipeline

__all__ = ["CheckpointView", "view"]


@dataclass(frozen=True)
class CheckpointView:
    """One cut: its global manifest (for one stage: derived from its checkpoint) and every
    stage's manifest; ``noun`` names the cut (:attr:`barrierflow.pipeline.words.Words.cut_noun`)."""

    manifest: GlobalManifest
    stages: dict[str, Manifest]
    noun: str
    #: stage -> Kafka source -> its barrier offsets in the form its ``starting_offsets`` takes
    #: (``{"clicks": {"0": 120}}``): what a new pipeline started where this cut is is given
    starting_offsets: dict[str, dict[str, dict[str, dict[str, int]]]] = field(default_factory=dict)
    #: every Iceberg and Delta table of the pipeline as this cut recorded it (spec order)
    tables: list[CutTable] = field(default_factory=list)

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints show --json``, one shape for every pipeline: the cut's
        global manifest (``checkpoint_id``, ``attempt``, times) with ``noun``, and under
        ``stages`` each stage's ``part`` of the cut (batch, mode, alignment and sync/async
        times) and its ``manifest`` in full, and ``tables``: every lakehouse table of the cut
        (:meth:`barrierflow.pipeline.table_cut.CutTable.as_dict`; empty without tables)."""
        document = self.manifest.model_dump(mode="json")
        parts = document.pop("stages")
        return {**document, "noun": self.noun,
                "stages": {name: {"part": parts.get(name), "manifest": m.model_dump(mode="json"),
                                  **({"starting_offsets": self.starting_offsets[name]}
                                     if self.starting_offsets.get(name) else {})}
                           for name, m in self.stages.items()},
                "tables": [t.as_dict() for t in self.tables]}


def view(pipeline: OpenedPipeline, checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` of an opened pipeline (``barrierflow checkpoints show``)."""
    from barrierflow.kafka_io.partition_ids import starting_offsets_form

    manifest = pipeline.cuts.get(checkpoint_id)
    stages = {s.name: s.store.get(checkpoint_id) for s in pipeline.stages}
    kafka = {s.name: s.spec.source.name for s in pipeline.stages if s.source_type in ("kafka", "spark_kafka")}
    starting = {name: {source: starting_offsets_form(offsets)
                       for source, offsets in stages[name].barrier_offsets.items() if source == kafka[name] and offsets}
                for name in kafka if name in stages}
    return CheckpointView(manifest, stages, words(pipeline).cut_noun, {k: v for k, v in starting.items() if v},
                          cut_table_versions(pipeline.stages, checkpoint_id))
