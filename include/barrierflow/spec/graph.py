"""The dataflow graph of a multi-stage spec, validated when the spec is loaded.

Vertices are stages; an edge ``writer -> reader`` exists for every channel a stage writes
(a ``channel`` sink) and another reads (a ``channel`` source). :func:`build_graph` checks:

1. stage names and channel names are unique, and no two channels share a topic;
2. every ``channel`` source or sink names a declared channel, and a stage reads or writes a
   channel at most once;
3. every channel is written by exactly one stage and read by at least one;
4. at least one stage reads an external source (the coordinator injects barriers there), and
   every stage is reachable from such a stage (otherwise no barrier ever reaches it).

Cycles are allowed (a feedback channel): a depth-first search from the source stages, in spec
order, classifies each edge; an edge to a stage still on the search stack is a *back-edge*.
Each back-edge closes one reported :class:`Cycle`; the stage it enters never waits for
barriers on it (alignment would deadlock) and logs the records that arrive on it between its
snapshot and the barrier instead (the paper's back-edge logging).

Every problem is reported with the field (dotted path) and the stage or channel it concerns,
collected into one :class:`~barrierflow.errors.SpecError` (exit code 2).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec, PipelineSpec


@dataclass(frozen=True)
class Edge:
    """Channel ``channel`` carries records from stage ``writer`` to stage ``reader``."""

    channel: str
    writer: str
    reader: str

    def __str__(self) -> str:
        return f"{self.writer} -[{self.channel}]-> {self.reader}"


@dataclass(frozen=True)
class Cycle:
    """A cycle of stages (``stages[0]`` first, back to it), closed by ``back_edge``."""

    stages: tuple[str, ...]
    back_edge: Edge

    def __str__(self) -> str:
        return " -> ".join((*self.stages, self.stages[0])) + f" (back-edge: channel {self.back_edge.channel!r} " \
            f"from {self.back_edge.writer} to {self.back_edge.reader})"


@dataclass(frozen=True)
class StageGraph:
    """The validated graph: stages in spec order, edges, back-edges and cycles."""

    stages: tuple[str, ...]
    writer: dict[str, str]
    readers: dict[str, tuple[str, ...]]
    edges: tuple[Edge, ...]
    back_edges: tuple[Edge, ...]
    cycles: tuple[Cycle, ...]
    source_stages: tuple[str, ...]

    @property
    def final_stages(self) -> tuple[str, ...]:
        """Stages that write no channel: their sinks are the pipeline's output (2PC)."""
        writers = set(self.writer.values())
        return tuple(s for s in self.stages if s not in writers)

    def is_back_edge(self, channel: str, reader: str) -> bool:
        return any(e.channel == channel and e.reader == reader for e in self.back_edges)

    def inputs(self, stage: str) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.reader == stage)


def build_graph(spec: PipelineSpec) -> tuple[StageGraph | None, list[tuple[str, str]]]:
    """The graph of ``spec`` and the problems found (``(field, message)`` pairs); the graph is
    None when there are problems. See the module docstring for the rules."""
    problems: list[tuple[str, str]] = []
    # Rule 1.
    _unique([s.name for s in spec.stages], "stages", "stage", problems)
    _unique([c.name for c in spec.channels], "channels", "channel", problems)
    topics: dict[tuple[str, str], str] = {}
    for i, channel in enumerate(spec.channels):
        key = (channel.bootstrap, channel.topic_for(spec.name))
        if key in topics:
            problems.append((f"channels.{i}.topic", f"channel {channel.name!r} uses topic {key[1]!r} like channel "
                             f"{topics[key]!r}; give each channel its own topic"))
        topics.setdefault(key, channel.name)
    declared = [c.name for c in spec.channels]
    # Rule 2.
    writers: dict[str, list[str]] = defaultdict(list)
    readers: dict[str, list[str]] = defaultdict(list)
    for i, stage in enumerate(spec.stages):
        for kind, items, index in (("sources", stage.sources, readers), ("sinks", stage.sinks, writers)):
            seen: set[str] = set()
            for j, item in enumerate(items):
                if not isinstance(item, ChannelSourceSpec | ChannelSinkSpec):
                    continue
                where = f"stages.{i}.{kind}.{j}.channel"
                if item.channel not in declared:
                    problems.append((where, f"stage {stage.name!r} names channel {item.channel!r}, which is not "
                                     f"declared (channels: {', '.join(declared)}); add it under 'channels' or "
                                     "fix the name"))
                    continue
                if item.channel in seen:
                    verb = "reads" if kind == "sources" else "writes"
                    problems.append((where, f"stage {stage.name!r} {verb} channel {item.channel!r} twice; "
                                     "name it once"))
                    continue
                seen.add(item.channel)
                index[item.channel].append(stage.name)
    # Rule 3.
    for i, name in enumerate(declared):
        wrote, read = writers.get(name, []), readers.get(name, [])
        if not wrote:
            problems.append((f"channels.{i}", f"channel {name!r} is written by no stage; add a sink "
                             f"{{type: channel, channel: {name}}} to the stage that produces it, or remove it"))
        elif len(wrote) > 1:
            problems.append((f"channels.{i}", f"channel {name!r} is written by stages {', '.join(wrote)}; a channel "
                             "has exactly one writing stage: give each its own channel"))
        if not read:
            problems.append((f"channels.{i}", f"channel {name!r} is read by no stage; add a source "
                             f"{{type: channel, channel: {name}, json_fields: ...}} to the stage that consumes it, "
                             "or remove it"))
    if problems:
        return None, problems
    edges = tuple(Edge(channel, writers[channel][0], reader)
                  for stage in spec.stages for channel in stage.output_channels for reader in readers[channel])
    # Rule 4.
    sources = tuple(s.name for s in spec.stages if s.has_external_source)
    if not sources:
        return None, [("stages", "no stage reads an external source (every source is a channel), so no barrier "
                       "is ever injected; give the first stage a generator or kafka source")]
    back_edges, cycles, reached = _depth_first(spec, edges, sources)
    for i, stage in enumerate(spec.stages):
        if stage.name not in reached:
            problems.append((f"stages.{i}", f"stage {stage.name!r} is not reachable from a stage with an external "
                             f"source ({', '.join(sources)}), so no barrier ever reaches it; feed it from one of "
                             "those stages or give it an external source"))
    if problems:
        return None, problems
    graph = StageGraph(
        stages=tuple(s.name for s in spec.stages),
        writer={c: w[0] for c, w in writers.items()},
        readers={c: tuple(r) for c, r in readers.items()},
        edges=edges,
        back_edges=back_edges,
        cycles=cycles,
        source_stages=sources,
    )
    return graph, []


def _unique(names: list[str], field: str, what: str, problems: list[tuple[str, str]]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            problems.append((f"{field}.{i}.name", f"{what} name {name!r} is used twice; names must be unique"))
        seen.add(name)


def _depth_first(spec: PipelineSpec, edges: tuple[Edge, ...], roots: tuple[str, ...]
                 ) -> tuple[tuple[Edge, ...], tuple[Cycle, ...], set[str]]:
    """Iterative DFS from ``roots`` (spec order); returns back-edges, their cycles and the
    reached stages. White = unseen, grey = on the stack, black = finished."""
    outgoing: dict[str, list[Edge]] = defaultdict(list)
    for edge in edges:
        outgoing[edge.writer].append(edge)
    grey: list[str] = []
    on_stack: set[str] = set()
    black: set[str] = set()
    back: list[Edge] = []
    cycles: list[Cycle] = []
    for root in roots:
        if root in black:
            continue
        grey.append(root)
        on_stack.add(root)
        cursor: dict[str, int] = {root: 0}
        while grey:
            node = grey[-1]
            out = outgoing[node]
            if cursor[node] >= len(out):
                grey.pop()
                on_stack.discard(node)
                black.add(node)
                continue
            edge = out[cursor[node]]
            cursor[node] += 1
            if edge.reader in on_stack:
                back.append(edge)
                start = grey.index(edge.reader)
                cycles.append(Cycle(tuple(grey[start:]), edge))
            elif edge.reader not in black:
                grey.append(edge.reader)
                on_stack.add(edge.reader)
                cursor[edge.reader] = 0
    return tuple(back), tuple(cycles), black
