"""The Kafka key of each row a channel carries, a column at a time.

Contract: :func:`encode_keys` is :func:`~barrierflow.sinks.kafka.encode_key` of every value of
a column (the Kafka sink's key text, so a channel and a Kafka sink keyed by the same column
agree on each row's key), with a fast path for integer and string columns. The channel writer
(:mod:`barrierflow.sinks.channel`) picks a row's partition from it; the rows themselves travel
as Arrow row batches (:mod:`barrierflow.kafka_io.row_batches`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def encode_keys(column: pa.Array) -> list[bytes | None]:
    """The Kafka key of each value of ``column``: :func:`~barrierflow.sinks.kafka.encode_key`."""
    import pyarrow as pa

    values: list[Any] = column.to_pylist()
    if pa.types.is_integer(column.type):
        return [None if v is None else str(v).encode() for v in values]
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in values]
    from barrierflow.sinks.kafka import encode_key

    return [encode_key(v) for v in values]
