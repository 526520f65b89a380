"""A final stage's output recomputed with Spark batch by replaying its chain of stages.

The stream runs each stage on what the stages before it wrote to their channels. The batch
replay runs each stage's own transformation (its derived spec's, :mod:`barrierflow.pipeline.stage_options`)
on the previous stage's *batch result* instead:

* a source stage's input is its source's records (as for a single stage,
  :func:`barrierflow.batch.source_records.source_records`: the generator's of the event-time
  range, a Kafka source's of the offset ranges its own checkpoint of the cut covers,
  :func:`kafka_source_stages`);
* a stage fed by channels gets, per channel it reads, the writing stage's batch result as the
  channel delivers rows: ``topic`` (the channel's topic) and the reading source's
  ``json_fields``, each converted to its type; a row with a field missing or null is dropped,
  as the stream's channel reader sends it to the dead-letter output. Several channels are
  unioned (the ``topic`` column tells them apart), as the stage reads them as one source.

The stages upstream of the final stage are replayed in topological order, each once (a stage
that feeds two others is computed once and read by both).

What cannot be recomputed honestly is refused (:class:`StageReplayError`, exit 2), never
approximated:

* a cycle upstream of the final stage: what went around a feedback channel depends on when
  the stream's batches ran, which a batch replay does not know;
* an upstream stage whose output mode is not ``append`` (``update``, ``complete``): the rows it
  wrote to its channel depend on how the stream cut its micro-batches (see
  :func:`barrierflow.pipeline.final_stages.replay_obstacle`);
* a transformation that reads a channel's Kafka metadata ``partition``, ``offset`` or
  ``timestamp``: they depend on the broker (which partition a row went to, when it was
  appended), not on the rows; the replay does not make them up, so the transformation's
  reference to them fails and is reported naming the stage.

The event-time range is applied as for one stage: each source stage reads the records of
``[start, end)`` and the comparison keeps the final output's windows inside the range. This
assumes, as the single-stage comparison does, that the stages carry the source's event time
through (a stage that shifts event times would be reported as differing, never as equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from barrierflow.batch.source_records import KafkaRanges, source_records
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.pipeline.final_stages import replay_obstacle, upstream_stages
from barrierflow.spec.graph import build_graph
from barrierflow.spec.models import KafkaSourceSpec
from barrierflow.spec.stages import ChannelSourceSpec, PipelineSpec
from barrierflow.transforms.context import TransformContext, load_transformation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from barrierflow.batch.recompute import KafkaSources
    from barrierflow.spec.models import StageSpec

#: Spark SQL type of each channel ``json_fields`` type (as the stream's channel reader decodes them).
CHANNEL_TYPES = {"string": "string", "long": "bigint", "double": "double", "timestamp": "timestamp",
                 "boolean": "boolean"}
#: Columns a channel delivers that a batch replay cannot reproduce (they depend on the broker).
BROKER_COLUMNS = ("partition", "offset", "timestamp")


class StageReplayError(UserInputError):
    """The final stage's output cannot be recomputed by a batch replay of its stages (a cycle
    upstream of it, an upstream stage not in append mode, or a transformation that reads a
    channel's broker metadata)."""


def replay_order(pipeline: PipelineSpec, final: str) -> list[str]:
    """The stages the output of ``final`` depends on, ``final`` last, each after every stage it
    reads. Raises StageReplayError for a cycle among them (naming it and its back-edge)."""
    obstacle = replay_obstacle(pipeline, final)
    if obstacle is not None:
        raise StageReplayError(
            f"pipeline {pipeline.name!r}: {obstacle}, so its output cannot be recomputed in batch; check it with "
            "the rollups and the data-quality report instead")
    graph, _ = build_graph(pipeline)
    assert graph is not None  # replay_obstacle built it
    needed = upstream_stages(pipeline, final)
    order: list[str] = []
    while len(order) < len(needed):
        ready = [s for s in needed if s not in order and all(e.writer in order for e in graph.inputs(s))]
        if not ready:  # only a cycle leaves none ready, and cycles were refused above
            raise StageReplayError(f"pipeline {pipeline.name!r}: no order of {needed} runs each stage after the "
                                   "stages it reads")
        order.extend(ready)
    return order


def channel_rows(rows: DataFrame, topic: str, fields: Mapping[str, str]) -> DataFrame:
    """``rows`` (what the writing stage produced) as a stage reading the channel gets them:
    ``topic`` and the ``fields`` converted to their types; rows with a missing or null field are
    dropped (the stream's reader sends them to the dead-letter output)."""
    from pyspark.sql import functions as F

    columns = [(F.col(f"`{name}`") if name in rows.columns else F.lit(None)).cast(CHANNEL_TYPES[kind]).alias(name)
               for name, kind in fields.items()]
    return rows.select(F.lit(topic).alias("topic"), *columns).dropna(subset=list(fields))


def kafka_source_stages(pipeline: PipelineSpec, stage_specs: Mapping[str, StageSpec],
                        final: str) -> KafkaSources:
    """The stages upstream of ``final`` (itself included) that read an external Kafka source (not
    a channel, which a derived spec reads as Kafka too): name -> (derived spec, its own
    checkpoint store, whose manifests record the offsets it read)."""
    return {name: (stage_specs[name], CheckpointStore.for_spec(stage_specs[name]))
            for name in upstream_stages(pipeline, final)
            if not any(isinstance(s, ChannelSourceSpec) for s in pipeline.stage(name).sources)
            and isinstance(stage_specs[name].sources[0], KafkaSourceSpec)}


def replay_final_stage(spark: SparkSession, pipeline: PipelineSpec, stage_specs: Mapping[str, StageSpec],
                       final: str, start: datetime | None, end: datetime,
                       kafka: Mapping[str, KafkaRanges] | None = None, *, spec_path: str = "<spec>") -> DataFrame:
    """The batch recomputation of stage ``final``'s output from the source records of
    ``[start, end)`` (module docstring). ``stage_specs``: each stage's derived single-stage spec;
    ``kafka``: the offset ranges to read of each Kafka-fed source stage, by name.

    Raises:
        StageReplayError: a cycle upstream of ``final``, or a transformation that reads a
            channel's broker metadata. UserInputError: a source stage whose source cannot be
            re-read (a Kafka source stage without its ranges in ``kafka``). SpecError: a
            transformation that does not import.
    """
    from pyspark.errors import AnalysisException

    results: dict[str, DataFrame] = {}
    for name in replay_order(pipeline, final):
        stage, spec = pipeline.stage(name), stage_specs[name]
        channels = [s for s in stage.sources if isinstance(s, ChannelSourceSpec)]
        if channels:
            parts = []
            for source in channels:
                writer = next(s.name for s in pipeline.stages if source.channel in s.output_channels)
                topic = pipeline.channel(source.channel).topic_for(pipeline.name)
                parts.append(channel_rows(results[writer], topic, source.json_fields))
            rows = parts[0]
            for part in parts[1:]:
                rows = rows.unionByName(part)
        else:
            rows = source_records(spark, spec, start, end, (kafka or {}).get(name))
        transform = load_transformation(spec, spec_path)
        try:
            results[name] = transform(rows, TransformContext(spec, dict(spec.transformation.options)))
        except AnalysisException as exc:
            used = [c for c in BROKER_COLUMNS if f"`{c}`" in str(exc) or f"'{c}'" in str(exc)]
            if channels and used:
                raise StageReplayError(
                    f"pipeline {pipeline.name!r}: the transformation of stage {name!r} reads the channel's broker "
                    f"column(s) {used}, which depend on the broker (the partition a row went to, its offset, when "
                    "it was appended), not on the rows: a batch replay cannot reproduce them, so stage "
                    f"{final!r}'s output cannot be recomputed in batch") from exc
            raise
    return results[final]
