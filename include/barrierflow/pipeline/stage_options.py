"""Every option of a stage, derived from its pipeline in one place (Spark-free).

A stage of a multi-stage pipeline runs as a single-stage :class:`StageSpec` under the hood:
name ``<pipeline>-<stage>``, work dir ``<work_dir>/stages/<stage>``, checkpoint store
``<checkpoint.storage>/stages/<stage>``. Everything else the pipeline sets applies to every
stage unchanged, and is copied here and nowhere else:

* **checkpoint**: every field of the pipeline's ``checkpoint`` section (``interval``, ``timeout``,
  ``min_pause``, ``max_concurrent``, ``retained``, ``tolerable_failed_checkpoints``, ``mode``,
  ``alignment_timeout``, ``synchronous_upload``, ``async_nice``, ``sink_commit_retries``,
  ``sink_commit_backoff``); only ``storage`` moves below ``stages/<stage>``;
* **event time** (column, watermark delay, idleness, watermark alignment): the stage's reader
  plans its batches with them (:class:`~barrierflow.sources.planning.PlanningOptions`), its
  coordinator records event times in its manifests;
* **trigger** (interval, adaptive batch sizing ``target_batch_duration``), **spark** (with the
  stage's own ``shuffle_partitions`` over the pipeline's, :func:`stage_spark`),
  **verification**, **reports**;
* **dead letters and event-time records** below ``<uri>/stages/<stage>`` of the pipeline's
  shared paths;
* **batch** is the stage's own (``stages[].batch``: its output's columns are its own); a stage
  with a Parquet sink and no ``batch.rollups`` gets ``rollups/<stage>`` beside the sink's folder
  (:func:`stage_batch`), so two final stages writing beside each other never share rollups.

A stage that reads channels reads them as one Kafka source over their topics
(:func:`channel_input`), so one planner sees every input partition and aligns them all; a
stage that writes a channel gets a ``discard`` placeholder sink in the derived spec (the
channel writer is built by the runtime, :mod:`barrierflow.sinks.factory`).
"""

from __future__ import annotations

from collections.abc import Mapping

from barrierflow.errors import UserInputError
from barrierflow.sinks.parquet import rollups_beside
from barrierflow.spec.models import (
    PIPELINE_WIDE_FIELDS,
    BatchSpec,
    CheckpointSpec,
    DiscardSinkSpec,
    KafkaSourceSpec,
    ParquetSinkSpec,
    SparkSpec,
    StageSpec,
)
from barrierflow.spec.paths import project_home
from barrierflow.spec.sink_set import several_sinks_problem
from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec, PipelineSpec, StageEntry
from barrierflow.storage.object_dir import is_object_uri

#: The longest stage name a pipeline may derive (``<pipeline>-<stage>``), as for pipeline names.
MAX_NAME = 63


def stage_name(pipeline: PipelineSpec, stage: StageEntry) -> str:
    """The derived single-stage name of ``stage`` (``<pipeline>-<stage>``).

    Raises:
        UserInputError: it is longer than 63 characters.
    """
    name = f"{pipeline.name}-{stage.name}"
    if len(name) > MAX_NAME:
        raise UserInputError(f"stage {stage.name!r}: '{name}' (pipeline-stage) is longer than {MAX_NAME} "
                             "characters; shorten the pipeline or stage name")
    return name


def check_runnable(stage: StageEntry) -> None:
    """Raise UserInputError unless ``stage`` has sinks it can write together
    (:func:`~barrierflow.spec.sink_set.several_sinks_problem`) and either one source or only
    channel sources (what the runtime builds today)."""
    channels = [s for s in stage.sources if isinstance(s, ChannelSourceSpec)]
    problem = several_sinks_problem(f"stage {stage.name!r}", list(stage.sinks))
    if problem:
        raise UserInputError(problem)
    if len(stage.sources) != 1 and len(channels) != len(stage.sources):
        raise UserInputError(f"stage {stage.name!r}: running a stage with several sources that are not all "
                             "channels is not built yet; give it either one source or only channel sources")


def channel_input(pipeline: PipelineSpec, stage: StageEntry, servers: Mapping[str, str]) -> KafkaSourceSpec:
    """The channels ``stage`` reads, as one Kafka source over their topics (``servers``: channel
    name -> ``host:port`` list). Its ``json_fields`` are the union of the channels' fields; when
    the channels carry different fields, ``topic_fields`` says which each channel's records must
    carry, and the others are null in its rows (the ``topic`` column tells the channels apart).

    Raises:
        UserInputError: the stage reads no channel, its channels are on different brokers or have
            different ``client`` settings, or two channels give one field different types.
    """
    sources = [s for s in stage.sources if isinstance(s, ChannelSourceSpec)]
    if not sources:
        raise UserInputError(f"stage {stage.name!r} reads no channel")
    brokers = {servers[s.channel] for s in sources}
    if len(brokers) > 1:
        raise UserInputError(
            f"stage {stage.name!r} reads channels {[s.channel for s in sources]} on different brokers "
            f"({sorted(brokers)}); a stage reads its channels as one source, so they must share the brokers: put "
            "the channels on one cluster (the same bootstrap)")
    clients = {pipeline.channel(s.channel).client for s in sources}
    if len(clients) > 1:
        raise UserInputError(
            f"stage {stage.name!r} reads channels {[s.channel for s in sources]} with different 'client' settings; a "
            "stage reads its channels as one source with one client: give the channels the same 'client' block")
    union: dict[str, str] = {}
    for source in sources:
        for name, kind in source.json_fields.items():
            if union.setdefault(name, kind) != kind:
                givers = [s.channel for s in sources if name in s.json_fields]
                raise UserInputError(
                    f"stage {stage.name!r}: field {name!r} has different types in the json_fields of channels "
                    f"{givers}; a stage's rows have one type per column: give it one type in every channel (or "
                    "rename it in the upstream stage's transformation)")
    topics = [pipeline.channel(s.channel).topic_for(pipeline.name) for s in sources]
    topic_fields = {topic: list(s.json_fields) for topic, s in zip(topics, sources, strict=True)
                    if set(s.json_fields) != set(union)}
    return KafkaSourceSpec(
        name=sources[0].source_name if len(sources) == 1 else "channels", type="kafka",
        bootstrap_servers=brokers.pop(), topics=topics, format="json", json_fields=union,
        topic_fields=topic_fields, max_records_per_batch=min(s.max_records_per_batch for s in sources),
        client=clients.pop())


def stage_batch(stage: StageEntry) -> BatchSpec:
    """The ``batch`` section of the stage's derived spec: the stage's own, with
    ``rollups`` defaulting to ``<sink folder's parent>/rollups/<stage>`` for a Parquet sink (its
    first, when it writes several)."""
    sink = next((s for s in stage.sinks if isinstance(s, ParquetSinkSpec)), None)
    if stage.batch.rollups or sink is None:
        return stage.batch
    return stage.batch.model_copy(update={"rollups": f"{rollups_beside(sink.path).rstrip('/')}/{stage.name}"})


def stage_spark(pipeline: PipelineSpec, stage: StageEntry) -> SparkSpec:
    """The ``spark`` section of the stage's derived spec: the pipeline's, with the stage's own
    ``shuffle_partitions`` (when it sets one) over both ``spark.shuffle_partitions`` and a
    ``spark.sql.shuffle.partitions`` in ``spark.conf``."""
    if stage.shuffle_partitions is None:
        return pipeline.spark
    conf = {k: v for k, v in pipeline.spark.conf.items() if k != "spark.sql.shuffle.partitions"}
    return pipeline.spark.model_copy(update={"shuffle_partitions": stage.shuffle_partitions, "conf": conf})


def derive_stage_spec(pipeline: PipelineSpec, stage: StageEntry, *, work_dir: str,
                      servers: Mapping[str, str]) -> StageSpec:
    """The single-stage spec ``stage`` runs as (see the module docstring). ``work_dir`` is the
    pipeline's absolute work dir; ``servers`` maps channel name -> ``host:port`` list.

    Raises:
        UserInputError: the stage is not runnable (:func:`check_runnable`), its derived name is
            too long, or its channels cannot be read as one source (:func:`channel_input`).
    """
    check_runnable(stage)
    source = stage.sources[0]
    if isinstance(source, ChannelSourceSpec):
        source = channel_input(pipeline, stage, servers)
    sinks = [DiscardSinkSpec(name=s.sink_name, type="discard") if isinstance(s, ChannelSinkSpec) else s
             for s in stage.sinks]
    checkpoint = pipeline.checkpoint.model_copy(
        update={"storage": f"{pipeline.checkpoint.storage.rstrip('/')}/stages/{stage.name}"})
    return StageSpec(
        name=stage_name(pipeline, stage), work_dir=f"{work_dir}/stages/{stage.name}", sources=[source],
        transformation=stage.transformation, sinks=sinks, trigger=pipeline.trigger, checkpoint=checkpoint,
        event_time=pipeline.event_time, spark=stage_spark(pipeline, stage), verification=pipeline.verification,
        reports=pipeline.reports, dead_letter_path=pipeline.stage_path(pipeline.dead_letter_path, stage.name),
        event_times_path=pipeline.stage_path(pipeline.event_times_path, stage.name),
        batch=stage_batch(stage))


def own_stage_spec(pipeline: PipelineSpec) -> StageSpec:
    """The spec the only stage of a pipeline that keeps its own checkpoints runs as: the
    pipeline's sections and its stage's source, transformation, sinks and ``batch``, on the
    pipeline's own paths (store ``checkpoint.storage``, work dir ``work_dir``: where a
    single-stage YAML has always kept them). The inverse of
    :func:`barrierflow.spec.stages.one_stage_pipeline`; nothing is validated again (the stage's
    sources and sinks are what a single-stage YAML allows: :func:`check_runnable` checks the
    count)."""
    (stage,) = pipeline.stages
    check_runnable(stage)
    checkpoint = CheckpointSpec.model_construct(pipeline.checkpoint.model_fields_set, **dict(pipeline.checkpoint))
    wide = {name: getattr(pipeline, name) for name in PIPELINE_WIDE_FIELDS}
    fields_set = (pipeline.model_fields_set & set(PIPELINE_WIDE_FIELDS)) | {"sources", "transformation", "sinks"} \
        | ({"batch"} & stage.model_fields_set)
    return StageSpec.model_construct(fields_set, **{**wide, "checkpoint": checkpoint}, sources=list(stage.sources),
                                     transformation=stage.transformation, sinks=list(stage.sinks), batch=stage.batch)


def pipeline_work_dir(spec: PipelineSpec) -> str:
    """The work dir of a pipeline of several stages: ``work_dir`` of the spec (relative to the
    project home), else ``var/<name>``; the stages' work dirs and the embedded broker's data
    dir are under it.

    Raises:
        UserInputError: ``work_dir`` is on object storage, which only a single-stage pipeline's
            work dir may be (its stages' channels and broker data live under this folder).
    """
    base = spec.work_dir or f"var/{spec.name}"
    if is_object_uri(base):
        raise UserInputError(
            f"pipeline {spec.name}: work_dir {base} is on object storage, which only a single-stage pipeline's "
            "work dir may be; give a pipeline of several stages a work_dir on a file system every node mounts "
            "(docs/deployment.md, 'What changes on a real cluster')")
    return base if base.startswith("/") else str(project_home() / base)
