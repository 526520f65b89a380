"""What a valid spec describes, in one shape for a spec of one stage and of several.

A single-stage spec is a graph of one stage named after the pipeline, no channels, edges nor
cycles, and that stage both its source and its final stage. ``title`` is how messages name the
pipeline (``single-stage pipeline NAME``, ``pipeline NAME of N stages``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from barrierflow.spec.graph import Cycle, Edge, build_graph
from barrierflow.spec.models import PipelineSpec
from barrierflow.spec.stages import StagedPipelineSpec


@dataclass(frozen=True)
class SpecSummary:
    """What a valid spec describes (module docstring)."""

    pipeline: str
    title: str
    stages: tuple[str, ...]
    channels: dict[str, str] = field(default_factory=dict)
    edges: tuple[Edge, ...] = ()
    cycles: tuple[Cycle, ...] = ()
    source_stages: tuple[str, ...] = ()
    final_stages: tuple[str, ...] = ()
    mode: str = "aligned"
    alignment_timeout: float = 0.0
    #: Every source spec of every stage, in the spec's order (channel inputs included).
    sources: tuple[Any, ...] = ()
    #: What ``validate`` warns about (not errors: the spec is valid), one line each.
    warnings: tuple[str, ...] = ()


def summarize(spec: PipelineSpec | StagedPipelineSpec) -> SpecSummary:
    """The summary of a loaded (so valid) spec."""
    mode, timeout = spec.checkpoint.mode.value, spec.checkpoint.alignment_timeout
    if not isinstance(spec, StagedPipelineSpec):
        return SpecSummary(spec.name, f"single-stage pipeline {spec.name}", (spec.name,),
                           source_stages=(spec.name,), final_stages=(spec.name,), mode=mode,
                           alignment_timeout=timeout, sources=tuple(spec.sources))
    graph, _problems = build_graph(spec)
    assert graph is not None  # the loader raised otherwise
    return SpecSummary(
        pipeline=spec.name,
        title=f"pipeline {spec.name} of {len(graph.stages)} stages",
        stages=graph.stages,
        channels={c.name: c.topic_for(spec.name) for c in spec.channels},
        edges=graph.edges,
        cycles=graph.cycles,
        source_stages=graph.source_stages,
        final_stages=graph.final_stages,
        mode=mode,
        alignment_timeout=timeout,
        sources=tuple(source for stage in spec.stages for source in stage.sources),
    )
