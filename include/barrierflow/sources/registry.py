"""The source registry: what the job runtime needs to know about each kind of source.

One :class:`SourceKind` per ``source.type`` of the spec: the Spark data source format that
reads it, how to look up the newest event time up to an offset per partition (for the
manifest's ``max_event_time``), and where a bounded source ends (for ``--until-exhausted``:
a generator's last record, a Kafka topic's end offsets when the run starts), what the reader
is told at run time beyond the spec (:attr:`SourceKind.run_options`: the channel source's
``alignment``), and whether the stage's checkpoints wait for an alignment record
(:attr:`SourceKind.aligned`: a stage fed by channels), how its input is read when it is not a
single Spark data source (:attr:`SourceKind.read`: Spark's Kafka connector and its barrier-only
source) and which JVM artifact set its session needs (:attr:`SourceKind.jvm_set`).
The runtime asks :func:`kind_named` (with :attr:`barrierflow.pipeline.model.Stage.source_type`)
and never branches on the source type, so a new source is added here and in its own module.

Every function imports its source module lazily: looking a kind up does not load pyspark or
kafka-python.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SpecError
from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec, StageSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AnySourceSpec = GeneratorSourceSpec | KafkaSourceSpec
#: (source spec, event-time store URI, partition -> end offset) -> partition -> newest event time
EventTimeLookup = Callable[[AnySourceSpec, str, Mapping[str, int]], dict[str, datetime | None]]
#: source spec -> partition -> end offset when the source is bounded (a generator with
#: ``records_per_partition``; a Kafka topic's end offsets when the run starts), else None
BoundedEnd = Callable[[AnySourceSpec], dict[str, int] | None]
#: source spec -> the Spark DDL schema of the rows the source hands the transformation
RowSchema = Callable[[AnySourceSpec], str]
#: (session, source spec, reader options) -> the stage's streaming input rows
ReadInput = Callable[["SparkSession", AnySourceSpec, Mapping[str, str]], "DataFrame"]


@dataclass(frozen=True)
class StageRun:
    """What a stage's run knows beyond its derived spec, for its reader's options.

    Attributes:
        attempt: the pipeline's attempt (a restore starts a new one).
        last_completed: the last completed cut (global checkpoint) when the run started.
        back_edge_topics: the topics of the back-edge channels the stage reads (a cycle).
        cutoffs: every restore's cutoffs of the stage's input (``{"attempt", "offsets"}``).
        rate_factors: ``topic:p`` -> read-rate factor of a deliberately slow input partition.
    """

    attempt: int = 0
    last_completed: int = 0
    back_edge_topics: tuple[str, ...] = ()
    cutoffs: list[dict[str, Any]] = field(default_factory=list)
    rate_factors: Mapping[str, float] = field(default_factory=dict)


#: (the stage's derived spec, its run) -> extra reader options
RunOptions = Callable[[StageSpec, StageRun], dict[str, str]]


def _no_run_options(spec: StageSpec, run: StageRun) -> dict[str, str]:
    return {}


def _alignment_options(spec: StageSpec, run: StageRun) -> dict[str, str]:
    """The channel source's ``alignment`` option (:mod:`barrierflow.sources.channel`)."""
    return {"alignment": json.dumps({
        "mode": spec.checkpoint.mode.value, "alignment_timeout": spec.checkpoint.alignment_timeout,
        "attempt": run.attempt, "last_completed": run.last_completed, "back_edge_topics": list(run.back_edge_topics),
        "cutoffs": run.cutoffs, "rate_factors": dict(run.rate_factors)})}


@dataclass(frozen=True)
class SourceKind:
    """How the runtime handles one ``source.type``."""

    type: str
    format: str
    event_times: EventTimeLookup
    bounded_end: BoundedEnd
    #: the schema its Spark data source reports (``DataSource.schema``), without Spark
    row_schema: RowSchema
    run_options: RunOptions = _no_run_options
    #: whether a checkpoint completes only with the stage's alignment record (channel inputs)
    aligned: bool = False
    #: how the stage's input is read; None: ``spark.readStream.format(format)`` with the reader options
    read: ReadInput | None = None
    #: the JVM artifact set (barrierflow.jvm) the driver's class path needs; None: PySpark's own jars suffice
    jvm_set: str | None = None
    #: whether its reader replays its input from the first record the pipeline read to given end
    #: offsets in one batch (:data:`~barrierflow.sources.planning.REPLAY_UNTIL`): what rebuilding
    #: a stage's state needs
    replays_input: bool = False
    #: whether its input is what a broker retains (Kafka): a replay reads the bounded range from
    #: start offsets the rebuild locates (:data:`~barrierflow.sources.planning.REPLAY_FROM`), as
    #: far back as the broker still holds records
    retained_input: bool = False
    #: whether barrierflow's planner plans its micro-batches (its ``latestOffset`` reads the
    #: stage's control channel, so a hold admits no new data); False: Spark's connector plans them
    plans_batches: bool = True
    #: the timestamp column of its rows that holds each record's arrival in the source (Kafka's
    #: record timestamp); None: its records arrive when a micro-batch reads them
    #: (:mod:`barrierflow.runtime.freshness`)
    arrival_column: str | None = None


def _recorded_event_times(source: AnySourceSpec, event_time_uri: str,
                          partitions: Mapping[str, int]) -> dict[str, datetime | None]:
    """Event times the executors recorded per range read (see :mod:`.event_times`)."""
    from barrierflow.sources.event_times import EventTimeIndex

    index = EventTimeIndex(event_time_uri, source.name)
    return {p: index.max_event_time(p, end) for p, end in partitions.items()}


def _generator_event_times(source: AnySourceSpec, event_time_uri: str,
                           partitions: Mapping[str, int]) -> dict[str, datetime | None]:
    """The generator computes its event times from the offset (deterministic model)."""
    from barrierflow.sources.generator import GeneratorModel

    assert isinstance(source, GeneratorSourceSpec)
    model = GeneratorModel(source)
    return {p: model.max_event_time(int(p), end) for p, end in partitions.items()}


def _unknown_event_times(source: AnySourceSpec, event_time_uri: str,
                         partitions: Mapping[str, int]) -> dict[str, datetime | None]:
    """Spark's connector reads on the JVM: no per-partition event times are recorded."""
    return dict.fromkeys(partitions)


def _spark_kafka_read(spark: SparkSession, source: AnySourceSpec, options: Mapping[str, str]) -> DataFrame:
    from barrierflow.sources.spark_kafka import read_stream

    assert isinstance(source, KafkaSourceSpec)
    return read_stream(spark, source, options)


def _generator_end(source: AnySourceSpec) -> dict[str, int] | None:
    assert isinstance(source, GeneratorSourceSpec)
    if source.records_per_partition is None:
        return None
    return {str(p): source.records_per_partition for p in range(source.partitions)}


def _kafka_end(source: AnySourceSpec) -> dict[str, int] | None:
    """A Kafka topic is bounded by its end offsets when the run starts (records produced later
    are read too, but the run does not wait for them)."""
    from barrierflow.kafka_io.admin import end_offsets

    assert isinstance(source, KafkaSourceSpec)
    return end_offsets(source)


def _generator_schema(source: AnySourceSpec) -> str:
    from barrierflow.sources.generator import SCHEMA

    return SCHEMA


def _kafka_schema(source: AnySourceSpec) -> str:
    """Raises UserInputError: a ``json_fields`` name collides with a metadata column."""
    from barrierflow.sources.kafka import schema_for

    assert isinstance(source, KafkaSourceSpec)
    return schema_for(source)


def _unbounded(source: AnySourceSpec) -> dict[str, int] | None:
    return None


def reached(offsets: Mapping[str, int] | None, end: Mapping[str, int]) -> bool:
    """Whether ``offsets`` (a checkpoint's barrier offsets of one source) are at or past ``end``
    (its bounded end) in every partition of ``end``."""
    return offsets is not None and all(offsets.get(p, 0) >= e for p, e in end.items())


_KINDS: dict[str, SourceKind] = {
    "generator": SourceKind("generator", "barrierflow_generator", _generator_event_times, _generator_end,
                            _generator_schema, replays_input=True),
    "kafka": SourceKind("kafka", "barrierflow_kafka", _recorded_event_times, _kafka_end, _kafka_schema,
                        replays_input=True, retained_input=True, arrival_column="timestamp"),
    # A Kafka source with reader: spark: Spark's connector unioned with a barrier-only source
    # (sources/spark_kafka.py); the cut is the connector's offsets in Spark's offset log.
    "spark_kafka": SourceKind("spark_kafka", "kafka", _unknown_event_times, _kafka_end, _kafka_schema,
                              read=_spark_kafka_read, jvm_set="spark-kafka", plans_batches=False,
                              arrival_column="timestamp"),
    # The channels a stage reads, as one Kafka source over their topics (sources/channel.py):
    # Kafka's reader plus barrier alignment; event times recorded by the executors like Kafka's.
    "channel": SourceKind("channel", "barrierflow_channel", _recorded_event_times, _unbounded, _kafka_schema,
                          run_options=_alignment_options, aligned=True),
}


def source_kind(source: AnySourceSpec) -> SourceKind:
    """The registered kind of ``source`` (by its ``kind``: its ``type``, and for Kafka its ``reader``)."""
    return kind_named(source.kind)


def jvm_sets(sources: list[Any]) -> list[str]:
    """The JVM artifact sets the driver needs to read ``sources`` (source specs; a channel
    source, which has no ``kind``, needs none), sorted."""
    found: set[str] = set()
    for source in sources:
        kind = _KINDS.get(str(getattr(source, "kind", "")))
        if kind is not None and kind.jvm_set is not None:
            found.add(kind.jvm_set)
    return sorted(found)


def kind_named(type_name: str) -> SourceKind:
    """The registered kind ``type_name`` (``generator``, ``kafka``, ``spark_kafka``, ``channel``).

    Raises:
        SpecError: no such kind (the message lists the known ones).
    """
    try:
        return _KINDS[type_name]
    except KeyError:
        raise SpecError("<spec>", [("sources.type", f"unknown source type {type_name!r}; "
                                                    f"known: {sorted(_KINDS)}")]) from None


def registered_types() -> list[str]:
    return sorted(_KINDS)
