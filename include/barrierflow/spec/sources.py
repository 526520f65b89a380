"""The spec models of the sources a stage reads: the built-in generator and Kafka.

They live apart from the rest of the spec because the Python workers Spark starts for a
source (the planner of every micro-batch, the readers of its partitions) import them: this
module and its imports stay small, so a worker starts in a fraction of the time the whole
spec would cost (Spark gives a new Python worker a fixed 10 s to connect back).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from barrierflow.spec.generator_params import silent_seconds
from barrierflow.spec.kafka_client import KafkaClientField, NestedClientFields
from barrierflow.spec.kafka_params import KAFKA_METADATA_COLUMNS, dead_letters_malformed, fields_of, source_kind
from barrierflow.spec.strict import Strict as _Strict


class SilentPeriod(_Strict):
    """A wall-clock span, counted from the moment the source's reader started, in which one
    generator partition produces nothing (a producer outage): an idle partition for tests and
    benchmarks of idleness. Afterwards it produces at its rate again from where it stopped
    (the records it missed are never made up, so its event time falls behind)."""

    partition: int = Field(..., ge=0)
    start: Annotated[float, Field(ge=0, description="seconds after the reader started")]
    end: Annotated[float, Field(gt=0, description="seconds after the reader started")]

    @model_validator(mode="after")
    def _ordered(self) -> SilentPeriod:
        if self.end <= self.start:
            raise ValueError(f"silent period of partition {self.partition}: end ({self.end:g}) must be after start "
                             f"({self.start:g})")
        return self


class GeneratorSourceSpec(_Strict):
    """The built-in deterministic generator: record ``i`` of partition ``p`` is a pure
    function of ``(p, i)`` and these options, so any offset range re-reads identically."""

    name: str = "generator"
    type: Literal["generator"]
    partitions: int = Field(4, ge=1, le=1024)
    rows_per_second: float = Field(
        1000.0, ge=0, description="per partition; 0 = as fast as batches allow (benchmarks)"
    )
    max_records_per_batch: int = Field(100_000, ge=1, description="per partition and batch")
    keys: int = Field(10_000, ge=1)
    event_time_start: str = "2026-01-01T00:00:00+00:00"
    event_time_skew_ms: list[int] = Field(
        default_factory=list, description="per-partition event-time offset (ms); missing = 0"
    )
    partition_rate_factors: list[float] = Field(
        default_factory=list, description="per-partition multiplier of rows_per_second; missing = 1"
    )
    event_time_step_ms: float | None = Field(
        None, gt=0, description="event time between consecutive records of a partition; default 1000/rate (1 ms "
                                "when unthrottled)")
    malformed_every: int = Field(0, ge=0, description="every k-th record is malformed; 0 = none")
    records_per_partition: int | None = Field(
        None, ge=0, description="bounded source: each partition ends after this many records"
    )
    silent_periods: list[SilentPeriod] = Field(
        default_factory=list, description="throttled generators only: spans in which a partition produces nothing")

    @model_validator(mode="after")
    def _silent_periods_fit(self) -> GeneratorSourceSpec:
        for period in self.silent_periods:
            if period.partition >= self.partitions:
                raise ValueError(f"silent_periods: partition {period.partition} does not exist (the generator has "
                                 f"{self.partitions})")
        if self.silent_periods and self.rows_per_second <= 0:
            raise ValueError("silent_periods need a throttled generator (rows_per_second > 0): an unthrottled one "
                             "has no wall clock to be silent in")
        return self

    @property
    def kind(self) -> str:
        """The registered source kind that reads it (:mod:`barrierflow.sources.registry`)."""
        return "generator"

    def silent_seconds(self, partition: int, elapsed: float) -> float:
        """How many of the first ``elapsed`` seconds ``partition`` was silent."""
        return silent_seconds(self.silent_periods, partition, elapsed)




def refuse_metadata_names(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (``json_fields``) unless one is named like a Kafka metadata column (ValueError)."""
    clash = [name for name in fields if name in KAFKA_METADATA_COLUMNS]
    if clash:
        raise ValueError(f"json_fields {clash} collide with the columns every Kafka and channel row has "
                         f"{list(KAFKA_METADATA_COLUMNS)}; rename the field in the records (or, for a channel, in "
                         "the writing stage's transformation)")
    return fields


class KafkaSourceSpec(_Strict, NestedClientFields):
    """Kafka topics, read by ``reader``:

    * ``python`` (the default): barrierflow's own reader, without a Spark connector jar (ranges
      with confluent-kafka, topic metadata and offsets with kafka-python; :mod:`barrierflow.kafka_io`);
      it plans every batch itself, so barriers, watermark alignment, idleness and adaptive batch
      sizing are decided per partition;
    * ``spark``: Spark's own Kafka connector (``spark.readStream.format("kafka")``, JVM-side
      reads, the ``spark-kafka`` JVM artifact set); Spark plans the batches and barrierflow records
      a checkpoint's cut from Spark's offset log (:mod:`barrierflow.sources.spark_kafka`). What
      needs barrierflow's planner is refused (:func:`spark_reader_problems`).
    """

    client_owner = "Kafka source"

    name: str = "kafka"
    type: Literal["kafka"]
    reader: Literal["python", "spark"] = Field(
        "python", description="python: barrierflow's reader (plans every batch: per-partition watermark alignment, "
                              "idleness, adaptive batch sizing); spark: Spark's own Kafka connector (JVM reads, "
                              "the spark-kafka jars from 'make install')")
    bootstrap_servers: str = Field(
        ..., description="host:port list; '${ENV_VAR}' is expanded from the environment"
    )
    topics: list[str] = Field(..., min_length=1)
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[str, int]] = "earliest"
    max_records_per_batch: int = Field(100_000, ge=1, description="per partition and batch")
    format: Literal["raw", "json"] = "raw"
    json_fields: dict[str, Literal["string", "long", "double", "timestamp", "boolean"]] = Field(
        default_factory=dict, description="for format=json: field name -> type"
    )
    topic_fields: dict[str, list[str]] = Field(
        default_factory=dict,
        description="for format=json over topics whose records carry different fields (a stage reading channels "
                    "with different json_fields): topic -> the json_fields its records must carry; the others are "
                    "null in its rows. A topic not named carries every field")
    malformed: Literal["dead_letter", "nulls"] | None = Field(
        None, description="format=json: what a malformed record becomes (not a JSON object; a field missing, null "
                          "or of the wrong type): dead_letter (written to the dead-letter output, not a row: "
                          "always with reader: python) or nulls (a row with null fields: what reader: spark does "
                          "unless set to dead_letter, which reads each batch twice and cannot be switched over "
                          "existing state)")
    poll_timeout: Annotated[float, Field(gt=0)] = 10.0
    unavailable_timeout: Annotated[float, Field(
        ge=0, description="seconds the source rides out brokers that do not answer: planning offers no new "
                          "data and reading a planned range keeps waiting; past it the query fails")] = 120.0
    client: KafkaClientField = None

    @field_validator("json_fields")
    @classmethod
    def _no_metadata_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        return refuse_metadata_names(value)

    @model_validator(mode="after")
    def _json_needs_fields(self) -> KafkaSourceSpec:
        if self.format == "json" and not self.json_fields:
            raise ValueError("format 'json' needs json_fields (field name -> type)")
        for topic, names in self.topic_fields.items():
            if topic not in self.topics:
                raise ValueError(f"topic_fields names topic {topic!r}, which is not in topics {self.topics}")
            unknown = sorted(set(names) - set(self.json_fields))
            if unknown:
                raise ValueError(f"topic_fields of {topic!r} names {unknown}, which are not in json_fields")
        return self

    @model_validator(mode="after")
    def _spark_reader_fields(self) -> KafkaSourceSpec:
        if self.reader == "spark" and self.topic_fields:
            raise ValueError("topic_fields needs reader 'python' (Spark's connector decodes every topic with the same "
                             "json_fields); remove topic_fields or set reader: python")
        if self.reader == "python" and self.malformed == "nulls":
            raise ValueError("malformed: nulls needs reader 'spark' (barrierflow's reader always writes malformed "
                             "records to the dead-letter output); remove malformed or set reader: spark")
        return self

    @property
    def dead_letters_malformed(self) -> bool:
        """Whether malformed records (format ``json``) go to the dead-letter output rather than
        become rows of nulls (``malformed``; by default: with ``reader: python`` only)."""
        return dead_letters_malformed(self.malformed, self.reader)

    @property
    def kind(self) -> str:
        """The registered source kind that reads it (:mod:`barrierflow.sources.registry`):
        ``kafka`` (barrierflow's reader) or ``spark_kafka`` (Spark's connector)."""
        return source_kind(self.reader)

    def fields_of(self, topic: str) -> dict[str, str]:
        """The ``json_fields`` the records of ``topic`` must carry (all, unless ``topic_fields``
        names the topic)."""
        return fields_of(self.json_fields, self.topic_fields, topic)


SourceSpec = Annotated[GeneratorSourceSpec | KafkaSourceSpec, Field(discriminator="type")]


