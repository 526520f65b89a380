"""Rows as PostgreSQL ``COPY`` input: a PostgreSQL sink's micro-batches written ahead in the form
its pre-commit sends, so that the driver streams bytes into ``COPY ... FROM STDIN (FORMAT csv)``
instead of turning every row into Python values.

Contracts:

* :func:`encodable`: whether a schema's rows can be written ahead as COPY input: every column is a
  boolean, integer, float, decimal, string, date or timestamp (seconds to microseconds). Arrow's
  CSV form of those values is read by PostgreSQL as the same value as psycopg's text form of the
  same value, provided the target column is of the value's own kind (:func:`fits`). A batch with
  any other column stays rows.
* :func:`encoded_copy_rows`: a table of rows as its COPY input, in row order: one row per chunk,
  :data:`COPY_COLUMN` (CSV without a header, UTF-8, nulls as unquoted empty fields and every string
  quoted, so an empty string is not null) and :data:`ROWS_COLUMN` (the chunk's row count); the
  rows' own schema travels in the table's schema metadata.
* :func:`is_encoded`, :func:`row_schema`, :func:`row_count`: whether a write-ahead table holds
  COPY input, the schema of the rows it encodes and how many there are.
* :func:`decoded`: the rows back, exactly (values and types) as they were encoded; for a target
  table whose column types would read the CSV text differently from psycopg's (:func:`fits`), and
  for an upsert, which applies rows one by one.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: The columns of a PostgreSQL sink's micro-batch written ahead as COPY input.
COPY_COLUMN = "__bf_pg_copy_csv"
ROWS_COLUMN = "__bf_pg_copy_rows"
#: Schema metadata key holding the encoded rows' Arrow schema (IPC-serialized).
_SCHEMA_KEY = b"barrierflow.copy_rows.schema"

#: PostgreSQL base types (``pg_type.typname``) that read each kind of Arrow value's CSV text as
#: psycopg's text form of it reads. A string is the same text both ways, so it fits any column.
_FITTING = {
    "boolean": {"bool"},
    "integer": {"int2", "int4", "int8", "numeric", "float4", "float8"},
    "float": {"numeric", "float4", "float8"},
    "decimal": {"numeric", "float4", "float8"},
    "date": {"date", "timestamp", "timestamptz"},
    "timestamp": {"timestamp", "timestamptz"},
}


def _kind(arrow_type: pa.DataType) -> str | None:
    """The kind of value an Arrow type holds, for :data:`_FITTING`; None when not encodable."""
    import pyarrow as pa

    t = pa.types
    if t.is_boolean(arrow_type):
        return "boolean"
    if t.is_integer(arrow_type):
        return "integer"
    if t.is_floating(arrow_type) and not t.is_float16(arrow_type):
        return "float"
    if t.is_decimal(arrow_type):
        return "decimal"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_date(arrow_type):
        return "date"
    if t.is_timestamp(arrow_type) and arrow_type.unit in ("s", "ms", "us"):
        return "timestamp"
    return None


def encodable(schema: pa.Schema) -> bool:
    """Whether rows of ``schema`` can be written ahead as COPY input (module contract)."""
    return all(_kind(field.type) is not None for field in schema) and len(schema) > 0


def fits(arrow_type: pa.DataType, pg_type_name: str) -> bool:
    """Whether a column of PostgreSQL base type ``pg_type_name`` (``pg_type.typname``) reads the
    CSV text of ``arrow_type``'s values as it reads psycopg's text form of them."""
    kind = _kind(arrow_type)
    return kind == "string" or (kind is not None and pg_type_name in _FITTING[kind])


def encoded_copy_rows(table: pa.Table) -> pa.Table:
    """``table``'s rows as COPY input (module contract), one chunk per record batch. The caller
    checks :func:`encodable` first."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    options = pcsv.WriteOptions(include_header=False, quoting_style="needed")
    chunks: list[bytes] = []
    counts: list[int] = []
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        buffer = io.BytesIO()
        pcsv.write_csv(batch, buffer, options)
        chunks.append(buffer.getvalue())
        counts.append(batch.num_rows)
    schema = pa.schema([pa.field(COPY_COLUMN, pa.binary()), pa.field(ROWS_COLUMN, pa.int64())],
                       metadata={_SCHEMA_KEY: table.schema.remove_metadata().serialize().to_pybytes()})
    return pa.table([pa.array(chunks, pa.binary()), pa.array(counts, pa.int64())], schema=schema)


def is_encoded(table: pa.Table) -> bool:
    """Whether a write-ahead table holds COPY input rather than rows."""
    return COPY_COLUMN in table.column_names


def row_count(table: pa.Table) -> int:
    """The number of rows a write-ahead table holds: the rows it encodes, or its own rows."""
    if not is_encoded(table):
        return int(table.num_rows)
    # a few chunk counts: no pyarrow.compute, whose import costs a fresh Python worker about 0.1 s
    return sum(count for count in table.column(ROWS_COLUMN).to_pylist() if count is not None)


def row_schema(table: pa.Table) -> pa.Schema:
    """The schema of the rows an encoded table holds."""
    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer((table.schema.metadata or {})[_SCHEMA_KEY]))


def decoded(table: pa.Table) -> pa.Table:
    """An encoded table's rows, exactly as :func:`encoded_copy_rows` was given them."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    schema = row_schema(table)
    read = pcsv.ReadOptions(column_names=schema.names)
    parse = pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
    convert = pcsv.ConvertOptions(column_types=schema, null_values=[""], strings_can_be_null=True,
                                  quoted_strings_can_be_null=False, true_values=["true"], false_values=["false"])
    parts = [pcsv.read_csv(io.BytesIO(chunk), read_options=read, parse_options=parse, convert_options=convert)
             for chunk in table.column(COPY_COLUMN).to_pylist()]
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([part.cast(schema) for part in parts])
