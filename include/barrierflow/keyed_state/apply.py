"""Running a keyed function on a stage's input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from barrierflow.errors import SpecError
from barrierflow.keyed_state.expiry import EVENT_MS_COLUMN, EventTimeTTL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from barrierflow.keyed_state.figures import KeyCounters
    from barrierflow.keyed_state.function import KeyedFunction


class StageContext(Protocol):
    """What :func:`apply_keyed_function` reads of a transformation's context
    (:class:`barrierflow.transforms.TransformContext` is one)."""

    @property
    def event_time_column(self) -> str | None: ...

    @property
    def ttl_seconds(self) -> float | None: ...

    @property
    def emit_on_expiry(self) -> bool: ...

    @property
    def output_mode(self) -> str: ...

    def with_watermark(self, df: DataFrame) -> DataFrame: ...

    @property
    def key_counters(self) -> KeyCounters | None: ...


def apply_keyed_function(df: DataFrame, ctx: StageContext, function: KeyedFunction,
                         keys: Sequence[str] = ("key",)) -> DataFrame:
    """``function`` run per value of the ``keys`` columns over ``df``, with the spec's
    ``transformation.ttl`` and ``emit_on_expiry``: Spark's ``transformWithState`` (Row-based) in
    ``timeMode="EventTime"`` after the spec's watermark (``ctx.with_watermark``), in the spec's
    output mode; each input row gets ``bf_event_ms`` (its event time in ms since the epoch).
    Its rows have ``function.output_schema``. Needs RocksDB state (``spark.state_store: rocksdb``).
    The context's ``key_counters`` (None: not counted) count the keys started and expired.

    Raises:
        SpecError: the spec has no ``event_time`` section (from ``ctx.with_watermark``), or its
            output mode is ``complete`` (Spark's ``transformWithState`` runs in append or update).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    from barrierflow.keyed_state.processor import KeyedProcessor

    if ctx.output_mode == "complete":
        raise SpecError("<spec>", [("transformation.output_mode", "a keyed function writes in output mode append or "
                                                                  "update, not complete; set output_mode: update")])
    watermarked = ctx.with_watermark(df)
    column = ctx.event_time_column
    assert column is not None  # with_watermark refused a spec without event_time
    rows = watermarked.withColumn(EVENT_MS_COLUMN, F.unix_millis(F.col(column)))
    ttl = EventTimeTTL.from_seconds(ctx.ttl_seconds, ctx.emit_on_expiry)
    mode = "Update" if ctx.output_mode == "update" else "Append"
    schema = function.output_schema
    struct = schema if isinstance(schema, StructType) else _parse_datatype_string(schema)
    assert isinstance(struct, StructType), f"output_schema {schema!r} is not a struct: 'name type, ...'"
    counters = ctx.key_counters
    if counters is not None:
        counters.attached = True
    return rows.groupBy(*keys).transformWithState(KeyedProcessor(function, ttl, struct.fieldNames(), counters),
                                                  struct, mode, "EventTime")
