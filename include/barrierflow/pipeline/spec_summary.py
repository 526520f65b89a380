"""What a valid spec describes, for a pipeline of one stage as for one of several.

A single-stage spec is a graph of one stage named after the pipeline, no channels, edges nor
cycles, and that stage both its source and its final stage (it falls out of the graph).
``title`` is how messages name the pipeline (``single-stage pipeline NAME``, ``pipeline NAME of N stages``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from barrierflow.pipeline.layout import cut_layout
from barrierflow.pipeline.words import WORDS
from barrierflow.spec.graph import Cycle, Edge, build_graph
from barrierflow.spec.stages import PipelineSpec


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


def summarize(spec: PipelineSpec) -> SpecSummary:
    """The summary of a loaded (so valid) spec."""
    graph, _problems = build_graph(spec)
    assert graph is not None  # the loader raised otherwise
    return SpecSummary(
        pipeline=spec.name,
        title=WORDS[cut_layout(spec).name].title.format(name=spec.name, count=len(graph.stages)),
        stages=graph.stages,
        channels={c.name: c.topic_for(spec.name) for c in spec.channels},
        edges=graph.edges,
        cycles=graph.cycles,
        source_stages=graph.source_stages,
        final_stages=graph.final_stages,
        mode=spec.checkpoint.mode.value,
        alignment_timeout=spec.checkpoint.alignment_timeout,
        sources=tuple(source for stage in spec.stages for source in stage.sources),
    )
