"""The source's records a stream-vs-batch comparison recomputes from, read again with Spark batch.

The generator is a pure function of (partition, offset) and its event time grows with the
offset, so the records of ``[start, end)`` are exactly the offsets found by binary search on
the event-time function: the stream read these very records, and a batch re-read cannot
differ from them. Malformed records are skipped as the stream skips them (to the dead-letter
output there, nowhere here).

A Kafka source is read again over exactly the offset ranges a checkpoint covers
(:func:`kafka_ranges`: per partition, from where the stream began, or from an earlier
checkpoint's barrier offsets, to the barrier offsets of the checkpoint whose output is
compared), with Spark's Kafka batch source (``spark.read.format("kafka")`` with
``startingOffsets``/``endingOffsets`` per partition, ``read_committed``, the spec's ``client``
settings) for either reader, decoded by the function the ``reader: spark`` stream decodes with
(:func:`barrierflow.sources.spark_kafka.decoded_rows`). For ``reader: python`` the rows the
stream's own decoder would have sent to the dead-letter output are dropped too
(:func:`_as_python_reader`), so the batch rows are the stream's rows. Which windows such a range
holds whole: every window that starts after the newest event time read before the range's start
(:attr:`KafkaRanges.after`; all of them when the range starts where the stream began). A range
whose first records Kafka no longer retains cannot be recomputed
(:class:`NotComparableError`, naming the partition and both offsets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.sources.generator import GeneratorBatchDataSource, GeneratorModel, first_offset_at_or_after
from barrierflow.spec.models import GeneratorSourceSpec, KafkaSourceSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.spec.models import StageSpec

#: JSON types (as Spark's ``schema_of_variant`` names them) a ``json_fields`` type takes in the
#: Python reader's decoder (:mod:`barrierflow.kafka_io.decoding`); a record whose field has
#: another is a dead letter there, so the batch read drops it too.
PYTHON_READER_JSON_TYPES = {"string": ("STRING",), "long": ("BIGINT",), "double": ("BIGINT", "DECIMAL", "DOUBLE"),
                            "boolean": ("BOOLEAN",), "timestamp": ("STRING", "BIGINT", "DECIMAL", "DOUBLE")}


class NotComparableError(UserInputError):
    """The stream-vs-batch comparison cannot apply to this output or range; the message is one
    line naming why (a range Kafka no longer retains, where the stream began unknown)."""


class NoEventTimeError(UserInputError):
    """A checkpoint records no event time read up to its barrier (:func:`after_events`)."""


def after_events(manifest: Manifest) -> datetime:
    """Just after the newest event time any source's partition had read up to ``manifest``'s
    barrier (its ``max_event_time``): a window that starts there holds no record read before.

    Raises:
        NoEventTimeError: the checkpoint records no event time (a source without event times, or a
            cut made before any record was read).
    """
    known = [t for by_partition in manifest.max_event_time.values() for t in by_partition.values() if t is not None]
    if not known:
        raise NoEventTimeError(f"checkpoint {manifest.checkpoint_id} of pipeline {manifest.pipeline!r} records no "
                               "event time read up to its barrier: which windows started after it is unknown")
    return max(known) + timedelta(microseconds=1)


@dataclass(frozen=True)
class KafkaRanges:
    """The offsets of a Kafka source a recomputation reads: ``ranges`` (partition ``"topic:p"``
    -> ``(start, end)``, end exclusive), ``origin`` (where the ranges start: ``the stream's first
    offsets`` or ``checkpoint N``) and ``after``: the windows that start at or after it hold
    every record they need inside the ranges (None: every window, the ranges start where the
    stream began)."""

    source: str
    ranges: dict[str, tuple[int, int]]
    origin: str
    after: datetime | None = None


def offset_ranges(source: GeneratorSourceSpec, start: datetime | None, end: datetime) -> dict[int, tuple[int, int]]:
    """Per partition, the offsets ``[first, last)`` whose event time is in ``[start, end)``
    (``start`` None: from the first record)."""
    model = GeneratorModel(source)
    limit = source.records_per_partition
    ranges = {}
    for p in range(source.partitions):
        first = 0 if start is None else first_offset_at_or_after(model, p, _us(start), limit)
        ranges[p] = (first, max(first, first_offset_at_or_after(model, p, _us(end), limit)))
    return ranges


def not_rereadable(spec: StageSpec) -> str:
    """Why :func:`source_records` cannot re-read the spec's source ("" when it can: the
    generator, and Kafka over the offset ranges of a checkpoint)."""
    source = spec.source
    if isinstance(source, GeneratorSourceSpec | KafkaSourceSpec):
        return ""
    return f"pipeline {spec.name!r}: recomputing from a {source.type!r} source is not supported"


def stream_first_offsets(source: KafkaSourceSpec, partitions: Mapping[str, int],
                         retained: Mapping[str, int]) -> tuple[dict[str, int] | None, str]:
    """Where the stream began reading each of ``partitions`` (``"topic:p"``), as far as it is
    known, and "" - or None and why it is not known. ``retained``: each partition's oldest
    retained offset now. ``earliest`` (or an explicit ``-2``) began at the partition's log
    start, which is 0 as long as Kafka deleted nothing (a log start only grows); ``latest`` (or
    ``-1``) began at an end offset nobody recorded."""
    wanted = source.starting_offsets
    first: dict[str, int] = {}
    for key in partitions:
        topic, _, number = key.rpartition(":")
        offset = (-1 if wanted == "latest" else -2 if wanted == "earliest"
                  else int(wanted.get(topic, {}).get(number, -2)))
        if offset == -1:
            return None, (f"Kafka source {source.name!r} began at the then latest offset of {key} (starting_offsets "
                          "latest), which is not recorded")
        if offset == -2:
            if retained.get(key, 0) > 0:
                return None, (f"Kafka source {source.name!r} began at the log start of {key} (earliest), and Kafka "
                              f"has deleted records since (its oldest retained offset is now {retained[key]})")
            offset = 0
        first[key] = offset
    return first, ""


def kafka_ranges(source: KafkaSourceSpec, end: Manifest, earlier: list[Manifest], *,
                 start: datetime | None = None, since: Manifest | None = None, before: datetime | None = None,
                 retained: Mapping[str, int] | None = None) -> KafkaRanges:
    """The offset ranges of ``source`` to read again for the windows of ``end``'s output: every
    partition up to ``end``'s barrier offsets, from (``since`` given) ``since``'s barrier
    offsets, else from the first of these still retained by Kafka whose records before it hold
    no window starting at or after ``start``: where the stream began (:func:`stream_first_offsets`),
    then each checkpoint of ``earlier`` (completed before ``end``, ascending; its
    :attr:`KafkaRanges.after` is just after the newest event time read up to it) - for a
    ``start``, the newest such one; a checkpoint after which no window closes before ``before``
    (the end of the compared range) is no start. ``retained`` (each partition's oldest retained offset) is
    asked from the brokers when not given.

    Raises:
        NotComparableError: no such start is retained (one line: the partition, the offset the
            range would start at and the oldest one Kafka retains).
        SourceError: the brokers cannot be asked.
    """
    ends = dict(end.barrier_offsets.get(source.name, {}))
    if retained is None:
        from barrierflow.verification.source_range import kafka_beginning_offsets

        retained = kafka_beginning_offsets(source)

    def expired(begin: Mapping[str, int]) -> str:
        for key, offset in sorted(begin.items()):
            if offset < ends.get(key, offset) and offset < retained.get(key, 0):
                return (f"the records of {key} from offset {offset} are no longer retained (Kafka's oldest retained "
                        f"offset there is {retained[key]})")
        return ""

    def ranges(begin: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        return {key: (min(begin.get(key, 0), last), last) for key, last in sorted(ends.items())}

    if since is not None:
        begin = dict(since.barrier_offsets.get(source.name, {}))
        if why := expired(begin):
            raise NotComparableError(f"Kafka source {source.name!r}: {why}: the range from checkpoint "
                                     f"{since.checkpoint_id} cannot be read again")
        return KafkaRanges(source.name, ranges(begin), f"checkpoint {since.checkpoint_id}",
                           after_events(since))
    candidates: list[tuple[dict[str, int], str, datetime | None]] = []
    first, unknown = stream_first_offsets(source, ends, retained)
    if first is not None:
        candidates.append((first, "the stream's first offsets", None))
    for manifest in earlier:
        if manifest.checkpoint_id >= end.checkpoint_id or source.name not in manifest.barrier_offsets:
            continue
        try:
            after = after_events(manifest)
        except NoEventTimeError:
            continue
        candidates.append((dict(manifest.barrier_offsets[source.name]), f"checkpoint {manifest.checkpoint_id}",
                           after))
    usable = [c for c in candidates if start is None or c[2] is None or c[2] <= start]
    if start is not None:
        usable.reverse()  # the newest first: the least to read
    reasons = [unknown] if unknown else []
    for begin, origin, after in usable:
        if after is not None and before is not None and after >= before:
            continue  # no window starting after it has closed: a start that compares nothing
        if why := expired(begin):
            reasons.append(f"from {origin}, {why}")
            continue
        return KafkaRanges(source.name, ranges(begin), origin, after)
    what = "" if start is None else f" for windows from {start.isoformat()}"
    raise NotComparableError(f"Kafka source {source.name!r}: no offset range{what} up to checkpoint "
                             f"{end.checkpoint_id} can be read again: {'; '.join(reasons) or 'none is recorded'}")


def source_records(spark: SparkSession, spec: StageSpec, start: datetime | None, end: datetime,
                   kafka: KafkaRanges | None = None) -> DataFrame:
    """The source records a recomputation of the windows in ``[start, end)`` reads, as a batch
    DataFrame with the schema the streaming source has: the generator's records of that
    event-time range, or a Kafka source's records in the offset ranges ``kafka``
    (:func:`kafka_ranges`; the windows are cut to the range by the caller). Raises
    UserInputError for a source it cannot re-read (or a Kafka source without ranges)."""
    source = spec.source
    if isinstance(source, KafkaSourceSpec):
        if kafka is None:
            raise UserInputError(f"Kafka source {source.name!r}: the offset ranges to read again are not given")
        return kafka_records(spark, source, kafka.ranges)
    why = not_rereadable(spec)
    if why or not isinstance(source, GeneratorSourceSpec):
        raise UserInputError(why)
    ranges = offset_ranges(source, start, end)
    spark.dataSource.register(GeneratorBatchDataSource)
    return (spark.read.format(GeneratorBatchDataSource.name())
            .option("spec", source.model_dump_json())
            .option("ranges", json.dumps({str(p): list(r) for p, r in ranges.items()}))
            .load())


def kafka_records(spark: SparkSession, source: KafkaSourceSpec, ranges: Mapping[str, tuple[int, int]]) -> DataFrame:
    """The records of ``ranges`` (``"topic:p"`` -> ``[start, end)``) read with Spark's Kafka
    batch source and decoded as the stream decodes them (module docstring); none when every
    range is empty.

    Raises:
        SourceError: Spark's Kafka connector is not on the driver's class path (naming the fix).
        KafkaSecurityError: a secret or TLS file of ``client`` does not resolve here.
    """
    from barrierflow.sources.kafka import schema_for
    from barrierflow.sources.spark_kafka import connector_options, decoded_rows, load_connector

    wanted = {k: r for k, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return spark.createDataFrame([], schema_for(source))
    by_topic: dict[str, dict[str, tuple[int, int]]] = {}
    for key, r in wanted.items():
        topic, _, number = key.rpartition(":")
        by_topic.setdefault(topic, {})[number] = r
    options = connector_options(source.model_copy(update={"starting_offsets": "earliest"}), sorted(wanted))
    for streaming_only in ("subscribe", "maxOffsetsPerTrigger", "startingOffsets"):
        options.pop(streaming_only, None)
    options["includeHeaders"] = "true" if source.format == "raw" else "false"
    options["assign"] = json.dumps({t: sorted(int(n) for n in parts) for t, parts in by_topic.items()})
    options["startingOffsets"] = json.dumps({t: {n: r[0] for n, r in parts.items()} for t, parts in by_topic.items()})
    options["endingOffsets"] = json.dumps({t: {n: r[1] for n, r in parts.items()} for t, parts in by_topic.items()})
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    raw = load_connector(reader, f"Kafka source {source.name!r}: reading its records again")
    if source.reader == "python" and source.format == "json":
        return _as_python_reader(raw, source)
    rows = decoded_rows(raw, source)
    if source.format == "json" and source.dead_letters_malformed:
        # The stream dead-letters a record with a field Spark could not decode (``malformed: dead_letter``).
        from functools import reduce

        from pyspark.sql import functions as F

        rows = rows.filter(reduce(lambda a, b: a & b, [F.col(f"`{n}`").isNotNull() for n in source.json_fields]))
    return rows


def _as_python_reader(raw: DataFrame, source: KafkaSourceSpec) -> DataFrame:
    """The connector's records ``raw`` decoded as :func:`~barrierflow.sources.spark_kafka.decoded_rows`
    decodes them (Spark's from_json: a bad field is null), then as barrierflow's Python reader
    emits them: a record whose value is not a JSON object, or whose field is missing, null or of
    another JSON type than its ``json_fields`` type takes (:data:`PYTHON_READER_JSON_TYPES`), is
    a dead letter there, so it is dropped here; with ``topic_fields``, a record of such a topic
    needs only its fields, and the others are null in its row."""
    from pyspark.sql import functions as F

    from barrierflow.sources.spark_kafka import decoded_rows

    names = list(source.json_fields)
    kinds = [f"__barrierflow_kind_{i}" for i in range(len(names))]
    parsed = F.try_parse_json(F.col("value").cast("string"))
    typed = raw.select("*", *[F.schema_of_variant(F.variant_get(parsed, _path(name), "variant")).alias(kind)
                              for name, kind in zip(names, kinds, strict=True)])
    rows = decoded_rows(typed, source, carry=kinds)

    def fits(name: str) -> Column:
        kind = F.col(kinds[names.index(name)])
        allowed = F.lit(False)
        for json_type in PYTHON_READER_JSON_TYPES[source.json_fields[name]]:
            allowed = allowed | kind.startswith(json_type)
        return F.col(f"`{name}`").isNotNull() & F.coalesce(allowed, F.lit(False))

    def valid(fields: Mapping[str, str]) -> Column:
        out = F.lit(True)
        for name in fields:
            out = out & fits(name)
        return out

    columns = [F.col(f"`{c}`") for c in rows.columns if c not in kinds]
    if not source.topic_fields:
        return rows.filter(valid(source.json_fields)).select(*columns)
    keep = F.lit(False)
    for topic in source.topics:
        keep = keep | ((F.col("topic") == topic) & valid(source.fields_of(topic)))
    shown = []
    for name in [c for c in rows.columns if c not in kinds]:
        others = [t for t in source.topics if name in source.json_fields and name not in source.fields_of(t)]
        value = F.col(f"`{name}`")
        shown.append(F.when(~F.col("topic").isin(others), value).alias(name) if others else value)
    return rows.filter(keep).select(*shown)


def _path(name: str) -> str:
    """The JSON path of top-level field ``name``."""
    return "$['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _us(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} is naive; the event-time range needs timezone-aware datetimes")
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
