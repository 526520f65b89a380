"""The source's records of an event-time range, read again with Spark batch.

The generator is a pure function of (partition, offset) and its event time grows with the
offset, so the records of ``[start, end)`` are exactly the offsets found by binary search on
the event-time function: the stream read these very records, and a batch re-read cannot
differ from them. Malformed records are skipped as the stream skips them (to the dead-letter
output there, nowhere here).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.sources.generator import GeneratorBatchDataSource, GeneratorModel, first_offset_at_or_after
from barrierflow.spec.models import GeneratorSourceSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from barrierflow.spec.models import PipelineSpec


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


def not_rereadable(spec: PipelineSpec) -> str:
    """Why :func:`source_records` cannot re-read the spec's source ("" when it can: the generator)."""
    source = spec.source
    if isinstance(source, GeneratorSourceSpec):
        return ""
    return (f"pipeline {spec.name!r}: recomputing from a {source.type!r} source is not supported yet (only the "
            "built-in generator, which is deterministic per offset); for Kafka, recomputing from the retained "
            "range of the topic with a batch read is planned")


def source_records(spark: SparkSession, spec: PipelineSpec, start: datetime | None, end: datetime) -> DataFrame:
    """The source records with event time in ``[start, end)`` as a batch DataFrame (the schema
    the streaming source has). Raises UserInputError for a source it cannot re-read."""
    source = spec.source
    why = not_rereadable(spec)
    if why or not isinstance(source, GeneratorSourceSpec):
        raise UserInputError(why)
    ranges = offset_ranges(source, start, end)
    spark.dataSource.register(GeneratorBatchDataSource)
    return (spark.read.format(GeneratorBatchDataSource.name())
            .option("spec", source.model_dump_json())
            .option("ranges", json.dumps({str(p): list(r) for p, r in ranges.items()}))
            .load())


def _us(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} is naive; the event-time range needs timezone-aware datetimes")
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
