"""Vectorized decoding of JSON record values into Arrow columns.

The Kafka and channel sources decode a record's value as a JSON object and keep the spec's
``json_fields`` (:class:`barrierflow.kafka_io.decoding.RecordDecoder`). Decoding record by record
with :func:`json.loads` costs a few microseconds each and is the slowest step of a Kafka read;
:func:`decode_columns` decodes a whole chunk of values with Arrow's JSON reader instead (C++,
one pass, about 9x faster on this machine; ``make bench-kafka`` prints both side by side).

Contract: :func:`decode_columns` returns columns only when every value of the chunk is one the
per-record decoder accepts, with exactly the values it would produce; for anything else it
returns None and the caller decodes the chunk record by record (which sends the bad records
to the dead-letter output with their reasons). So the fast path changes speed, never output.
What sends a chunk to the per-record path (tests/kafka_io/test_json_columns.py shows each):

- a value that is null (a tombstone), does not start with ``{`` (a BOM, leading
  whitespace, an array, a scalar) or holds a line break (pretty-printed JSON: values are
  fed to Arrow one per line);
- bytes that are not UTF-8 anywhere in the chunk (Arrow does not check fields it skips);
- anything Arrow refuses: invalid JSON, a field of the wrong JSON type, an integer that is
  not an int64, a key given twice, a number too big for a double;
- a row count other than the number of values (two objects on one line);
- a field missing or null in any value;
- a ``timestamp`` field that is not an ISO-8601 string :meth:`datetime.fromisoformat` takes
  (in every value) nor an integer of epoch milliseconds within year 9999 (in every value).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: Largest absolute epoch-millisecond timestamp a ``timestamp`` field takes (9999-12-31T23:59:59.999Z).
MAX_EPOCH_MS = 253_402_300_799_999
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_timestamp_us(text: str) -> int:
    """Microseconds since the epoch of an ISO-8601 timestamp (UTC when it names no offset).

    Raises:
        ValueError: ``text`` is not a timestamp :meth:`datetime.fromisoformat` takes.
    """
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a ``json_fields`` type."""
    import pyarrow as pa

    return {
        "string": pa.string(),
        "long": pa.int64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[kind]


def decode_columns(values: Sequence[bytes | None], fields: Mapping[str, str]) -> list[pa.Array] | None:
    """One Arrow array per field of ``fields`` (name -> ``json_fields`` type), in order, with a
    row per value; None when the chunk must be decoded record by record (see the module)."""
    if not values or not fields:
        return None
    for value in values:
        if value is None or value[:1] != b"{":
            return None
    buffer = b"\n".join(values)  # type: ignore[arg-type]  # None was ruled out above
    if buffer.count(b"\n") != len(values) - 1 or b"\r" in buffer:
        return None
    try:
        buffer.decode("utf-8")
    except UnicodeDecodeError:
        return None
    has_timestamps = "timestamp" in fields.values()
    for timestamps_as in ("string", "long") if has_timestamps else ("string",):
        columns = _read(buffer, len(values), fields, timestamps_as)
        if columns is not None:
            return columns
    return None


def _read(buffer: bytes, rows: int, fields: Mapping[str, str], timestamps_as: str) -> list[pa.Array] | None:
    """Arrow's reading of ``buffer`` (``rows`` lines), timestamps read as ``timestamps_as``."""
    import pyarrow as pa
    import pyarrow.json as pa_json

    schema = pa.schema([(name, arrow_type(timestamps_as if kind == "timestamp" else kind))
                        for name, kind in fields.items()])
    try:
        table = pa_json.read_json(
            io.BytesIO(buffer),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(buffer) + 1)),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                               newlines_in_values=False),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_rows != rows:
        return None
    columns: list[pa.Array] = []
    for index, kind in enumerate(fields.values()):
        column = table.column(index).combine_chunks()
        if column.null_count:
            return None
        if kind == "timestamp":
            converted = _timestamps(column)
            if converted is None:
                return None
            column = converted
        columns.append(column)
    return columns


def _timestamps(column: pa.Array) -> pa.Array | None:
    """A ``timestamp`` column from its ISO-8601 strings or epoch milliseconds (None: a value
    the per-record decoder refuses)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = arrow_type("timestamp")
    if pa.types.is_string(column.type):
        cast = _cast_canonical(column)
        if cast is not None:
            return cast
        try:
            return pa.array([iso_timestamp_us(text) for text in column.to_pylist()], type=pa.int64()).cast(target)
        except ValueError:
            return None
    bounds = pc.min_max(column).as_py()
    if max(abs(bounds["min"]), abs(bounds["max"])) > MAX_EPOCH_MS:
        return None
    return pc.multiply(column, 1000).cast(target)


#: The ISO-8601 forms Arrow's cast parses exactly as :meth:`datetime.fromisoformat` does.
_CANONICAL = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?$"
_ZONED = r"(Z|[+-]\d{2}:\d{2})$"


def _cast_canonical(column: pa.Array) -> pa.Array | None:
    """A column of canonical ISO-8601 strings cast by Arrow (all with a zone offset, or all
    without: UTC); None for anything else, which is then parsed value by value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pc.all(pc.match_substring_regex(column, _CANONICAL)).as_py():
        return None
    if pc.any(pc.starts_with(column, "0000")).as_py():
        return None  # Arrow reads a year 0, Python's datetime has none
    zoned = pc.match_substring_regex(column, _ZONED)
    target = arrow_type("timestamp")
    try:
        if pc.all(zoned).as_py():
            return column.cast(target)
        if not pc.any(zoned).as_py():
            return column.cast(pa.timestamp("us")).cast(pa.int64()).cast(target)
    except pa.ArrowInvalid:
        return None
    return None
