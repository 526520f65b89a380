"""Typed models of a pipeline of several stages (``stages`` + ``channels`` in the YAML).

A multi-stage spec is a DAG (possibly with cycles) of stages, each one Spark query, connected
by channels: Kafka topics. A stage reads a channel with a source ``{type: channel, channel:
NAME}`` and writes one with a sink ``{type: channel, channel: NAME}``; every other source or
sink type is the same as in a single-stage spec. Checkpointing is the pipeline's (one
``checkpoint`` section), because a global checkpoint is one consistent cut over all stages.

These models check each field; the graph rules (every channel written by exactly one stage
and read by at least one, cycles and their back-edges) are in :mod:`barrierflow.spec.graph`,
which the loader runs after them.

Channel ``bootstrap``:

* ``embedded`` (the default): the project's Kafka-protocol broker started on 127.0.0.1 for
  local runs and the demo, with its data under the work dir. It runs outside the run's process
  group and saves its data when the run dies, also by SIGKILL; a SIGKILL of the broker process
  itself loses its last second of writes, which a restore then refuses to build on
  (:mod:`barrierflow.recovery.channel_barriers`; docs/chaos.md). Use a real Kafka for anything kept;
* ``env:VAR``: the ``host:port`` list in environment variable ``VAR``, read when the pipeline
  starts (:meth:`ChannelSpec.bootstrap_servers`), so a spec validates without it;
* ``host:port[,host:port...]``: an address (``${VAR}`` in the YAML is expanded at load time
  like anywhere in a spec).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from barrierflow.errors import UserInputError
from barrierflow.spec.kafka_client import ChannelClientField, KafkaClientSpec, NestedClientFields
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec, atomic_problems
from barrierflow.spec.models import (
    PIPELINE_WIDE_FIELDS,
    BatchSpec,
    CheckpointMode,
    CheckpointSpec,
    KafkaSourceSpec,
    ParquetSinkSpec,
    PipelineWide,
    SinkSpec,
    SourceSpec,
    StageSpec,
    TransformationSpec,
    _Strict,
    chaos_dag_problems,
    refuse_metadata_names,
    spark_reader_problems,
    ttl_problems,
)

EMBEDDED = "embedded"
_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
_ENV_REF = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


class ChannelSpec(_Strict, NestedClientFields):
    """A Kafka topic between stages. ``topic`` defaults to ``<pipeline>.<channel>``."""

    client_owner = "channel"

    name: str = Field(..., pattern=_NAME)
    topic: str = Field("", pattern=r"^$|^[A-Za-z0-9._-]{1,249}$")
    partitions: int = Field(2, ge=1, le=1024)
    bootstrap: str = EMBEDDED
    client: ChannelClientField = None

    @model_validator(mode="after")
    def _embedded_is_plaintext(self) -> ChannelSpec:
        if self.is_embedded and self.client is not None and self.client != KafkaClientSpec():
            raise ValueError("the embedded broker speaks PLAINTEXT on 127.0.0.1 only: a 'client' block applies to a "
                             "channel on a real cluster (bootstrap: 'host:port,...' or 'env:VAR')")
        return self

    @field_validator("bootstrap")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        value = value.strip()
        if value == EMBEDDED or _ENV_REF.match(value):
            return value
        servers = [s.strip() for s in value.split(",")]
        bad = [s for s in servers if not _ADDRESS.match(s)]
        if not servers or bad:
            raise ValueError(
                f"expected 'embedded', 'env:VARIABLE' or a 'host:port[,host:port]' list; {bad or [value]} "
                "is none of these")
        return ",".join(servers)

    def topic_for(self, pipeline: str) -> str:
        """The Kafka topic of this channel in pipeline ``pipeline``."""
        return self.topic or f"{pipeline}.{self.name}"

    @property
    def is_embedded(self) -> bool:
        return self.bootstrap == EMBEDDED

    def bootstrap_servers(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The ``host:port`` list of the channel's brokers; None for ``embedded`` (the runtime
        starts the broker and knows its address).

        Raises:
            UserInputError: ``env:VAR`` names a variable that is unset or empty.
        """
        if self.is_embedded:
            return None
        match = _ENV_REF.match(self.bootstrap)
        if match is None:
            return self.bootstrap
        env = os.environ if environ is None else environ
        value = env.get(match.group(1), "").strip()
        if not value:
            raise UserInputError(
                f"channel {self.name!r}: bootstrap {self.bootstrap!r} names environment variable "
                f"{match.group(1)}, which is not set; export it as the brokers' host:port list, or set "
                "the channel's bootstrap to 'embedded' for a local run")
        return value


class ChannelSourceSpec(_Strict):
    """Reads a channel written by another stage. Rows arrive as JSON objects (the writing
    stage's output rows); ``json_fields`` names the fields this stage reads and their types
    (as for a Kafka source with ``format: json``). Barrier records are never emitted."""

    name: str = ""
    type: Literal["channel"]
    channel: str = Field(..., pattern=_NAME)
    json_fields: dict[str, Literal["string", "long", "double", "timestamp", "boolean"]] = Field(
        ..., min_length=1, description="field name -> type")
    max_records_per_batch: int = Field(100_000, ge=1, description="per partition and batch")
    partition_rate_factors: list[Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=list, description="per channel partition, a factor (0, 1] on max_records_per_batch: "
                                          "[1, 0.1] reads partition 1 ten times slower (a slow consumer, for "
                                          "backpressure tests and benchmarks); missing partitions read at 1")

    @field_validator("json_fields")
    @classmethod
    def _no_metadata_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        return refuse_metadata_names(value)

    @property
    def source_name(self) -> str:
        return self.name or self.channel


class ChannelSinkSpec(_Strict):
    """Writes the stage's output rows (as JSON objects) to a channel, followed by a barrier
    record per partition when the stage's barrier batch of a checkpoint commits."""

    name: str = ""
    type: Literal["channel"]
    channel: str = Field(..., pattern=_NAME)
    key_column: str | None = None

    @property
    def sink_name(self) -> str:
        return self.name or self.channel


StageSourceSpec = Annotated[SourceSpec | ChannelSourceSpec, Field(discriminator="type")]
StageSinkSpec = Annotated[SinkSpec | ChannelSinkSpec, Field(discriminator="type")]


class StageEntry(_Strict):
    """One stage: one Spark query reading ``sources`` and writing ``sinks``.

    ``batch``: the batch side over the stage's committed Parquet output (rollups, the stream-vs-batch
    comparison, data quality), as ``batch`` of a single-stage spec; only a stage with a
    Parquet sink may set it (its default ``rollups`` folder is ``rollups/<stage>`` beside the
    sink's folder, so the final stages of one pipeline never share one).

    ``shuffle_partitions``: the stage's own shuffle partitions, over the pipeline's ``spark``
    ones (its derived spec's ``spark.shuffle_partitions``; one stage rescaled by ``barrierflow
    upgrade`` while the others keep theirs)."""

    name: str = Field(..., pattern=_NAME)
    description: str = ""
    sources: list[StageSourceSpec] = Field(..., min_length=1)
    transformation: TransformationSpec
    sinks: list[StageSinkSpec] = Field(..., min_length=1)
    batch: BatchSpec = BatchSpec()
    shuffle_partitions: int | None = Field(
        None, ge=1, description="this stage's spark.sql.shuffle.partitions (the partitions of its state); "
                                "default: the pipeline's spark.shuffle_partitions (or spark.sql.shuffle.partitions "
                                "in spark.conf)")

    @model_validator(mode="after")
    def _batch_needs_parquet(self) -> StageEntry:
        lakes = ParquetSinkSpec | IcebergSinkSpec | DeltaSinkSpec
        if "batch" in self.model_fields_set and not any(isinstance(s, lakes) for s in self.sinks):
            raise ValueError("batch applies to a stage with a Parquet sink or an Iceberg or Delta table (its "
                             "committed output is what the rollups, the stream-vs-batch comparison and the "
                             "data-quality report read); remove it here")
        return self

    @property
    def input_channels(self) -> list[str]:
        return [s.channel for s in self.sources if isinstance(s, ChannelSourceSpec)]

    @property
    def output_channels(self) -> list[str]:
        return [s.channel for s in self.sinks if isinstance(s, ChannelSinkSpec)]

    @property
    def has_external_source(self) -> bool:
        """Whether the stage reads a source that is not a channel (the coordinator injects
        barriers there)."""
        return any(not isinstance(s, ChannelSourceSpec) for s in self.sources)


class PipelineCheckpointSpec(CheckpointSpec):
    """The checkpoint options of a multi-stage pipeline: like a single stage's, and
    ``mode`` (``aligned`` / ``unaligned``) and ``alignment_timeout`` (aligned only: switch
    to unaligned for a checkpoint whose alignment takes longer; ``0s`` = never) apply, since
    a stage with several input partitions really aligns barriers that arrive in-band."""

    @field_validator("mode")
    @classmethod
    def _implemented_mode(cls, value: CheckpointMode) -> CheckpointMode:
        return value

    @field_validator("alignment_timeout")
    @classmethod
    def _implemented_alignment_timeout(cls, value: float) -> float:
        if value < 0:
            raise ValueError("alignment_timeout must be 0s (never switch) or a positive duration")
        return value

    @model_validator(mode="after")
    def _timeout_needs_aligned(self) -> PipelineCheckpointSpec:
        if self.mode is CheckpointMode.UNALIGNED and self.alignment_timeout > 0:
            raise ValueError("alignment_timeout applies to mode 'aligned' only (unaligned checkpoints never "
                             "wait for alignment); remove it or set mode: aligned")
        return self


class PipelineSpec(PipelineWide[PipelineCheckpointSpec]):
    """A pipeline: its stages, the channels between them, and the pipeline's sections
    (:class:`~barrierflow.spec.models.PipelineWide`). The loader returns one for every YAML: a
    multi-stage YAML as written (see the module docstring), a single-stage YAML as a pipeline of
    one stage named after it, with no channels (:func:`barrierflow.spec.loader.parse_any_spec`)."""

    channels: list[ChannelSpec] = Field(default_factory=list)
    stages: list[StageEntry] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _spark_reader_supported(self) -> PipelineSpec:
        for i, stage in enumerate(self.stages):
            problem = spark_reader_problems(list(stage.sources), where=f"stages.{i}.sources",
                                            event_time=self.event_time, trigger=self.trigger,
                                            checkpoint=self.checkpoint)
            if problem:
                raise ValueError(problem)
            if stage.input_channels and any(isinstance(s, KafkaSourceSpec) and s.reader == "spark"
                                            for s in stage.sources):
                raise ValueError(f"stage {stage.name!r} reads channels and a Kafka source with reader: spark; a "
                                 "stage that reads channels reads every input with barrierflow's reader (barriers "
                                 "arrive in-band): set reader: python on that source, or give it a stage of its own")
        return self

    @model_validator(mode="after")
    def _ttl_supported(self) -> PipelineSpec:
        for i, stage in enumerate(self.stages):
            problem = ttl_problems(stage.transformation, where=f"stages.{i}.transformation (stage {stage.name!r})",
                                   event_time=self.event_time, spark=self.spark)
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _chaos_dag_on_scratch_servers(self) -> PipelineSpec:
        sinks = [(f"stage {stage.name!r} sink {sink.name or sink.type!r}", sink)
                 for stage in self.stages for sink in stage.sinks]
        problem = chaos_dag_problems(self.chaos, sinks, [c.name for c in self.channels if not c.is_embedded])
        if problem:
            raise ValueError(problem)
        problem = atomic_problems(sinks)
        if problem:
            raise ValueError(problem)
        return self

    def stage_path(self, uri: str, stage: str) -> str:
        """Stage ``stage``'s part of a pipeline-level storage URI (``uri`` empty: '' = the default)."""
        return f"{uri.rstrip('/')}/stages/{stage}" if uri else ""

    def stage(self, name: str) -> StageEntry:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def channel(self, name: str) -> ChannelSpec:
        for channel in self.channels:
            if channel.name == name:
                return channel
        raise KeyError(name)


def is_staged(data: Any) -> bool:
    """Whether parsed YAML ``data`` is a multi-stage spec (it has ``stages``)."""
    return isinstance(data, dict) and "stages" in data


def one_stage_pipeline(spec: StageSpec) -> PipelineSpec:
    """The pipeline of the single-stage YAML that validated as ``spec``: its pipeline-wide
    sections, one stage named after it with its source, transformation, sinks and ``batch``, and
    no channels. Nothing is validated again (``spec`` is valid, and a stage entry allows what it
    holds); :func:`barrierflow.pipeline.stage_options.own_stage_spec` gives ``spec`` back."""
    fields_set = spec.model_fields_set
    wide = {name: getattr(spec, name) for name in PIPELINE_WIDE_FIELDS}
    checkpoint = PipelineCheckpointSpec.model_construct(spec.checkpoint.model_fields_set, **dict(spec.checkpoint))
    stage_fields = {"name", "sources", "transformation", "sinks"} | ({"batch"} & fields_set)
    stage = StageEntry.model_construct(stage_fields, name=spec.name, sources=list(spec.sources),
                                       transformation=spec.transformation, sinks=list(spec.sinks), batch=spec.batch)
    pipeline_fields = (fields_set & set(PIPELINE_WIDE_FIELDS)) | {"stages"}
    return PipelineSpec.model_construct(pipeline_fields, **{**wide, "checkpoint": checkpoint}, stages=[stage])
