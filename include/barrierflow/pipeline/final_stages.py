"""The final stages of a pipeline of several stages whose output is a Parquet lake (Spark-free).

A *final stage* writes no channel (:attr:`barrierflow.spec.graph.StageGraph.final_stages`): its
sink is the pipeline's output, committed through two-phase commit in the stage's own checkpoint
store. The batch side (rollups, the stream-vs-batch comparison, data quality) works on one such
stage whose sink is Parquet, through the stage's derived single-stage spec
(:func:`barrierflow.pipeline.stage_options.derive_stage_spec`): its committed ``part-*`` files,
its 2PC ledger and its reports are the stage's, in ``<checkpoint.storage>/stages/<stage>``.

Which stage: the one named (``--stage NAME`` on the command line, one DAG per such stage in
Airflow); it may be left out when the pipeline has exactly one final Parquet stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from barrierflow.errors import UserInputError
from barrierflow.spec.graph import Cycle, StageGraph, build_graph
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.spec.models import ParquetSinkSpec, StageSpec
from barrierflow.spec.stages import PipelineSpec, StageEntry

#: The brokers given to channels when a stage's spec is derived for the batch side: it reads
#: only the stores and the lake, never a channel.
NO_BROKER = "batch-side-reads-no-channel:9"


class FinalStageError(UserInputError):
    """The stage named for the batch side is not a final stage with a Parquet sink, or no stage
    was named and the pipeline does not have exactly one."""


def _graph(spec: PipelineSpec) -> StageGraph:
    graph, problems = build_graph(spec)
    if graph is None:  # a loaded spec's graph is valid: only a spec built in code gets here
        raise UserInputError(f"pipeline {spec.name!r}: {problems}")
    return graph


def upstream_stages(spec: PipelineSpec, stage: str) -> list[str]:
    """The stages whose output reaches ``stage`` through channels, and ``stage``, in spec order."""
    graph = _graph(spec)
    needed, todo = {stage}, [stage]
    while todo:
        for edge in graph.inputs(todo.pop()):
            if edge.writer not in needed:
                needed.add(edge.writer)
                todo.append(edge.writer)
    return [s for s in graph.stages if s in needed]


def upstream_cycle(spec: PipelineSpec, stage: str) -> Cycle | None:
    """A cycle among the stages ``stage`` depends on (:func:`upstream_stages`), or None."""
    needed = set(upstream_stages(spec, stage))
    return next((c for c in _graph(spec).cycles if needed & set(c.stages)), None)


def replay_obstacle(spec: PipelineSpec, stage: str) -> str | None:
    """Why the output of ``stage`` cannot be recomputed by replaying its upstream stages in
    batch (:mod:`barrierflow.batch.stage_replay`), or None when it can:

    * a cycle among the stages it depends on: what went around the feedback channel depends on
      when the stream's batches ran, which a batch replay cannot know;
    * an upstream stage whose output mode is not ``append``: what it wrote to its channel (an
      updated row per micro-batch, or the whole result every time) depends on how the stream
      cut its micro-batches, while a batch run gives one final row.
    """
    cycle = upstream_cycle(spec, stage)
    if cycle is not None:
        return (f"stage {stage!r} depends on the cycle {cycle}: what went around the feedback channel depends on "
                "when the stream's batches ran, which a batch replay cannot know")
    for name in upstream_stages(spec, stage):
        mode = spec.stage(name).transformation.output_mode
        if name != stage and mode != "append":
            return (f"stage {stage!r} reads what stage {name!r} wrote in output mode {mode!r}: those rows depend "
                    "on how the stream cut its micro-batches, while a batch run gives one final result")
    return None


def parquet_final_stages(spec: PipelineSpec) -> list[StageEntry]:
    """The final stages of ``spec`` that write a Parquet sink, in spec order."""
    final = set(_graph(spec).final_stages)
    return [s for s in spec.stages if s.name in final and any(isinstance(k, ParquetSinkSpec) for k in s.sinks)]


def lake_final_stages(spec: PipelineSpec) -> list[StageEntry]:
    """The final stages of ``spec`` whose sink is a committed lake the batch side reads (Parquet,
    or an Iceberg or Delta table, read as of a cut), in spec order."""
    final = set(_graph(spec).final_stages)
    return [s for s in spec.stages if s.name in final and lake_of(s.sinks) is not None]


def lake_of(sinks: list[Any]) -> ParquetSinkSpec | IcebergSinkSpec | DeltaSinkSpec | None:
    """The sink of a stage the batch side reads: its first Parquet sink, else its first Iceberg or
    Delta table; None when it writes neither."""
    return (next((s for s in sinks if isinstance(s, ParquetSinkSpec)), None)
            or next((s for s in sinks if isinstance(s, IcebergSinkSpec | DeltaSinkSpec)), None))


def _lake_kind(stages: list[StageEntry]) -> str:
    """How messages name the lakes of ``stages``: "a Parquet sink" when all are Parquet."""
    if all(isinstance(lake_of(s.sinks), ParquetSinkSpec) for s in stages):
        return "a Parquet sink"
    return "a Parquet sink or an Iceberg or Delta table"


def choose_final_stage(spec: PipelineSpec, name: str | None) -> StageEntry:
    """The final Parquet stage named ``name``; with ``name`` None, the pipeline's only one.

    Raises:
        FinalStageError: naming the stages that qualify and how to name one.
    """
    candidates = lake_final_stages(spec)
    listed = ", ".join(s.name for s in candidates) or "none"
    kind = _lake_kind(candidates)
    if name is None:
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise FinalStageError(
                f"pipeline {spec.name!r} has no final stage with a Parquet sink: the batch side (rollups, "
                "the stream-vs-batch comparison, data quality of the output) reads the Parquet lake (or the "
                "Iceberg or Delta table) a final stage (one that writes no channel) commits; give such a stage a "
                "'type: parquet' sink (or 'type: iceberg', 'type: delta')")
        raise FinalStageError(f"pipeline {spec.name!r} has several final stages with {kind} ({listed}): "
                              "name the one to work on with --stage NAME")
    try:
        stage = spec.stage(name)
    except KeyError:
        raise FinalStageError(f"pipeline {spec.name!r} has no stage {name!r}; final stages with {kind}: "
                              f"{listed}") from None
    if stage not in candidates:
        why = "writes a channel (its output goes on to other stages)" if stage.output_channels \
            else f"writes a {' and a '.join(repr(k.type) for k in stage.sinks)} sink, not Parquet, Iceberg or Delta"
        raise FinalStageError(f"pipeline {spec.name!r}: stage {name!r} {why}; the batch side reads the committed "
                              f"Parquet output (or Iceberg or Delta table) of a final stage: {listed}")
    return stage


@dataclass(frozen=True)
class LakeOutput:
    """A committed lake of a pipeline the batch side reads: the sink (Parquet, Iceberg or Delta)
    of a single-stage pipeline (``stage`` None) or that of a final stage of several; ``recomputable``
    as :class:`ParquetOutput`'s."""

    stage: str | None
    sink: ParquetSinkSpec | IcebergSinkSpec | DeltaSinkSpec
    output_event_interval: float
    recomputable: bool = True

    @property
    def uri(self) -> str:
        """What the output asset is named by: the Parquet folder or the Delta table's root; an
        Iceberg table ``iceberg://<catalog>/<namespace>.<table>`` (its location is the catalog's)."""
        if isinstance(self.sink, IcebergSinkSpec):
            return f"iceberg://{self.sink.catalog.name}/{self.sink.table}"
        return self.sink.path


def lake_outputs(spec: PipelineSpec) -> list[LakeOutput]:
    """Every committed lake of ``spec`` the batch side reads (Parquet folders, Iceberg and Delta
    tables), in spec order; a stage keeping its own checkpoints is not named (it is the pipeline)."""
    from barrierflow.pipeline.layout import cut_layout

    named = cut_layout(spec).named_stages
    return [LakeOutput(stage.name if named else None, lake, stage.batch.output_event_interval,
                       recomputable=replay_obstacle(spec, stage.name) is None)
            for stage in lake_final_stages(spec) if (lake := lake_of(stage.sinks)) is not None]


@dataclass(frozen=True)
class ParquetOutput:
    """A committed Parquet lake of a pipeline: the sink of a single-stage pipeline (``stage``
    None) or that of a final stage of several; ``recomputable``: its output can be recomputed
    in batch (:func:`replay_obstacle` finds nothing)."""

    stage: str | None
    sink: ParquetSinkSpec
    output_event_interval: float
    recomputable: bool = True


def parquet_outputs(spec: PipelineSpec) -> list[ParquetOutput]:
    """Every committed Parquet lake of ``spec`` (none when it writes no Parquet), in spec order;
    a stage keeping its own checkpoints is not named (it is the pipeline)."""
    from barrierflow.pipeline.layout import cut_layout

    named = cut_layout(spec).named_stages
    outputs = []
    for stage in parquet_final_stages(spec):
        sink = next(k for k in stage.sinks if isinstance(k, ParquetSinkSpec))  # its first Parquet sink
        outputs.append(ParquetOutput(stage.name if named else None, sink, stage.batch.output_event_interval,
                                     recomputable=replay_obstacle(spec, stage.name) is None))
    return outputs


@dataclass(frozen=True)
class BatchSide:
    """What the batch side of a spec works on: ``spec`` is a single-stage pipeline's own, or the
    derived spec of the final stage ``stage`` of ``pipeline``; ``stage_specs``: then every
    stage's derived spec (for the replay)."""

    spec: StageSpec
    pipeline: PipelineSpec | None = None
    stage: str | None = None
    stage_specs: dict[str, StageSpec] = field(default_factory=dict)


def batch_side(spec: PipelineSpec, stage: str | None, spec_path: str) -> BatchSide:
    """The spec the batch side of ``spec`` works on (``stage``: the final stage named, see
    :func:`choose_final_stage`; a stage keeping its own checkpoints is the pipeline, named by no
    ``--stage``).

    Raises:
        UserInputError: ``stage`` given for a single-stage spec. FinalStageError: see
            :func:`choose_final_stage`.
    """
    from barrierflow.pipeline.layout import cut_layout, stage_specs

    named = cut_layout(spec).named_stages
    if stage is not None and not named:
        raise UserInputError(f"{spec_path} is a single-stage spec: it has no stage {stage!r}; leave out --stage")
    specs = stage_specs(spec, servers={c.name: NO_BROKER for c in spec.channels})
    if not named:
        return BatchSide(specs[spec.stages[0].name])
    chosen = choose_final_stage(spec, stage)
    return BatchSide(specs[chosen.name], spec, chosen.name, specs)
