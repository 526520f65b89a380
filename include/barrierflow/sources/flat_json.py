"""Decoding ``format: json`` records read through Spark's Kafka connector.

:func:`decoded_record` returns one struct column of a record's JSON fields, equal for every
record to Spark's ``from_json(CAST(value AS STRING), <fields>)`` (PERMISSIVE: a field missing,
null or of the wrong type is null; a value that is not a JSON object gives nulls in every
field). It is barrierflow's JVM decoder (``barrierflow.jvm.FlatJsonDecoder``, built by ``make
install``): it reads the common case, a flat object of plain scalars (UTF-8 text, JSON
escapes in keys and values included), straight from the record's bytes, and leaves every
other record (malformed UTF-8 among them) to ``from_json`` inside the same expression, so the
rows never differ from Spark's. Measured on the Kafka benchmark's job (ASCII records), it
decodes a record in a fraction of ``from_json``'s time
(bench/results/kafka-side-by-side/2026-11-29-1015.md).

When the helper jar cannot be built (no ``javac``), the column is ``from_json`` itself: the same
rows, at Spark's speed, and a warning naming the fix is logged once per process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from barrierflow.errors import SourceError
from barrierflow.jvm.errors import JvmArtifactError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

logger = logging.getLogger(__name__)

__all__ = ["decoded_record"]

#: Spark SQL type names the decoder reads (the parse types of a source's ``json_fields``).
_TYPES = ("STRING", "BIGINT", "DOUBLE", "BOOLEAN")
_warned: list[str] = []


def decoded_record(spark: SparkSession, value: Column, fields: Mapping[str, str]) -> Column:
    """The struct of ``fields`` (name -> Spark SQL type: STRING, BIGINT, DOUBLE or BOOLEAN, in
    order) decoded from the binary column ``value``, as ``from_json`` decodes it (module docstring).

    Raises:
        SourceError: a field of another type (a ``timestamp`` field is parsed as STRING first).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.column import Column as SparkColumn
    from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

    unknown = {name: kind for name, kind in fields.items() if kind not in _TYPES}
    if unknown:
        raise SourceError(f"JSON fields of types the decoder does not read: {unknown}; parse them as one of "
                          f"{', '.join(_TYPES)} (a timestamp as STRING, then convert it)")
    ddl = ", ".join(f"`{name.replace('`', '``')}` {kind}" for name, kind in fields.items())
    spark_decoded = F.from_json(value.cast("string"), ddl)
    types = {"STRING": StringType(), "BIGINT": LongType(), "DOUBLE": DoubleType(), "BOOLEAN": BooleanType()}
    schema = StructType([StructField(name, types[kind], True) for name, kind in fields.items()])
    from barrierflow.jvm.helper import FLAT_JSON_CLASS, helper_instance

    try:
        decoder = helper_instance(spark, FLAT_JSON_CLASS)
    except JvmArtifactError as exc:
        if not _warned:
            _warned.append(str(exc))
            logger.warning("JSON records are decoded by Spark's from_json, not barrierflow's faster decoder: %s", exc)
        return spark_decoded
    return SparkColumn(decoder.decode(value._jc, spark_decoded._jc, schema.json()))  # type: ignore[operator]
