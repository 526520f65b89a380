"""Validate a spec, single- or multi-stage, and describe it (``barrierflow validate``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from barrierflow.spec.graph import Cycle, Edge, build_graph
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.stages import StagedPipelineSpec


@dataclass(frozen=True)
class SpecSummary:
    """What a valid spec describes. A single-stage spec has one stage named after the
    pipeline and no channels."""

    pipeline: str
    stages: tuple[str, ...]
    channels: dict[str, str] = field(default_factory=dict)
    edges: tuple[Edge, ...] = ()
    cycles: tuple[Cycle, ...] = ()
    source_stages: tuple[str, ...] = ()
    final_stages: tuple[str, ...] = ()
    mode: str = "aligned"
    alignment_timeout: float = 0.0

    @property
    def multi_stage(self) -> bool:
        return bool(self.channels)


def validate_spec(spec_path: str | os.PathLike[str]) -> SpecSummary:
    """Load the spec at ``spec_path`` (raises SpecError naming every problem) and summarise it."""
    spec = load_any_spec(spec_path)
    mode, timeout = spec.checkpoint.mode.value, spec.checkpoint.alignment_timeout
    if not isinstance(spec, StagedPipelineSpec):
        return SpecSummary(spec.name, (spec.name,), source_stages=(spec.name,), final_stages=(spec.name,),
                           mode=mode, alignment_timeout=timeout)
    graph, _problems = build_graph(spec)
    assert graph is not None  # the loader raised otherwise
    return SpecSummary(
        pipeline=spec.name,
        stages=graph.stages,
        channels={c.name: c.topic_for(spec.name) for c in spec.channels},
        edges=graph.edges,
        cycles=graph.cycles,
        source_stages=graph.source_stages,
        final_stages=graph.final_stages,
        mode=mode,
        alignment_timeout=timeout,
    )
