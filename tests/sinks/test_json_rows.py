"""A Kafka sink's records are its rows' JSON, encoded a column at a time
(:func:`barrierflow.sinks.json_rows.encode_values`): byte for byte what :func:`encode_value`
writes for each row dict, on seeded random tables of every type the encoder treats on its own
(integers, booleans, strings with escapes and characters outside the BMP, floats with NaN,
infinities and -0.0, timestamps with and without a zone, of each unit) and of the ones it hands to
the generic path (dates, decimals, binary, lists, structs, nanosecond timestamps, float16),
with nulls everywhere; and for the shapes a row dict treats specially (no columns, a repeated
column name, names that need escaping or hold ``%``)."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.sinks.json_rows import encode_value, encode_values

SEED = 20261204
ROWS = 300
TEXT = ["", "plain", 'quote " and \\ backslash', "tab\tnewline\nreturn\r", "\x00\x01\x1f control", "é ü ß",
        "日本語のテキスト", "emoji 😀 outside the BMP 𝄞", "\u2028 line separator", "%s %% %d", "{braces}"]


def _maybe(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.15 else value


def _random_columns(rng: random.Random) -> dict[str, pa.Array]:
    zone = timezone(timedelta(hours=5, minutes=30))
    start = datetime(1, 1, 1, tzinfo=UTC)

    def instant() -> datetime:  # years 1 to about 9970, a zero fraction as often as not
        return start + timedelta(seconds=rng.randint(0, 314_000_000_000),
                                 microseconds=rng.choice([0, rng.randint(0, 999_999)]))

    floats = [0.0, -0.0, 1.5, -2.25e-308, 1e300, 3.141592653589793, float("nan"), float("inf"), float("-inf"), 0.1]
    return {
        "int64": pa.array([_maybe(rng, rng.randint(-2**63, 2**63 - 1)) for _ in range(ROWS)], pa.int64()),
        "int8": pa.array([_maybe(rng, rng.randint(-128, 127)) for _ in range(ROWS)], pa.int8()),
        "uint64": pa.array([_maybe(rng, rng.randint(0, 2**64 - 1)) for _ in range(ROWS)], pa.uint64()),
        "bool": pa.array([_maybe(rng, rng.random() < 0.5) for _ in range(ROWS)], pa.bool_()),
        "text": pa.array([_maybe(rng, rng.choice(TEXT) + rng.choice(TEXT)) for _ in range(ROWS)], pa.string()),
        "large text": pa.array([_maybe(rng, rng.choice(TEXT)) for _ in range(ROWS)], pa.large_string()),
        "float64": pa.array([_maybe(rng, rng.choice([*floats, rng.uniform(-1e9, 1e9)])) for _ in range(ROWS)],
                            pa.float64()),
        "float32": pa.array([_maybe(rng, rng.choice([*floats, rng.uniform(-1e6, 1e6)])) for _ in range(ROWS)],
                            pa.float32()),
        "utc us": pa.array([_maybe(rng, instant()) for _ in range(ROWS)], pa.timestamp("us", tz="UTC")),
        "offset us": pa.array([_maybe(rng, instant()) for _ in range(ROWS)], pa.timestamp("us", tz="+00:00")),
        "naive us": pa.array([_maybe(rng, instant().replace(tzinfo=None)) for _ in range(ROWS)], pa.timestamp("us")),
        "zoned us": pa.array([_maybe(rng, instant()) for _ in range(ROWS)], pa.timestamp("us", tz="+05:30")),
        "null us": pa.array([None] * ROWS, pa.timestamp("us", tz="UTC")),
        "zoned ms": pa.array([_maybe(rng, instant().replace(microsecond=0).astimezone(zone)) for _ in range(ROWS)],
                             pa.timestamp("ms", tz="+05:30")),
        "naive s": pa.array([_maybe(rng, instant().replace(tzinfo=None, microsecond=0)) for _ in range(ROWS)],
                            pa.timestamp("s")),
        "ns": pa.array([_maybe(rng, rng.randint(0, 2**62)) for _ in range(ROWS)], pa.int64()).cast(pa.timestamp("ns")),
        "date": pa.array([_maybe(rng, date(1970, 1, 1) + timedelta(days=rng.randint(0, 700_000))) for _ in range(ROWS)],
                         pa.date32()),
        "decimal": pa.array([_maybe(rng, Decimal(rng.randint(-10**12, 10**12)).scaleb(-4)) for _ in range(ROWS)],
                            pa.decimal128(18, 4)),
        "binary": pa.array([_maybe(rng, rng.randbytes(rng.randint(0, 8))) for _ in range(ROWS)], pa.binary()),
        "list": pa.array([_maybe(rng, [rng.choice(TEXT) for _ in range(rng.randint(0, 3))]) for _ in range(ROWS)],
                         pa.list_(pa.string())),
        "struct": pa.array([_maybe(rng, {"n": rng.randint(0, 9), "s": rng.choice(TEXT)}) for _ in range(ROWS)],
                           pa.struct([("n", pa.int32()), ("s", pa.string())])),
        "float16": pa.array([_maybe(rng, 1.5) for _ in range(ROWS)], pa.float16()),
    }


def _row_by_row(table: pa.Table) -> list[bytes]:
    return [encode_value(row) for batch in table.to_batches() for row in batch.to_pylist()]


def test_every_type_encodes_byte_for_byte_as_the_row_dicts() -> None:
    rng = random.Random(SEED)
    columns = _random_columns(rng)
    table = pa.table(columns)
    assert encode_values(table) == _row_by_row(table)
    # in several chunks, and in a column order of its own
    names = list(columns)
    rng.shuffle(names)
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 150), table.slice(157)]).select(names)
    assert chunked.column(0).num_chunks == 3
    assert encode_values(chunked) == _row_by_row(chunked)


@pytest.mark.parametrize("names", [["a", "b"], ['quo"te', "back\\slash"], ["100%", "%s", "%%"], ["日本", "😀"]])
def test_column_names_are_json_keys_whatever_they_hold(names: list[str]) -> None:
    table = pa.table({name: pa.array([1, None, 3], pa.int64()) for name in names})
    assert encode_values(table) == _row_by_row(table)


def test_a_table_without_columns_and_one_whose_names_repeat() -> None:
    empty = pa.table({"a": [1, 2]}).select([])
    assert encode_values(empty) == [b"{}", b"{}"] == _row_by_row(empty)
    repeated = pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["k", "k"])
    assert encode_values(repeated) == _row_by_row(repeated)


def test_an_empty_table_has_no_records() -> None:
    assert encode_values(pa.table({"a": pa.array([], pa.int64())})) == []
    assert encode_values(pa.table({"t": pa.array([], pa.timestamp("us", tz="UTC"))})) == []


def test_a_timestamp_past_year_9999_fails_as_the_row_dicts_do() -> None:
    late = pa.table({"t": pa.array([253_402_300_800_000_000], pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
    with pytest.raises(OverflowError) as by_rows:
        _row_by_row(late)
    with pytest.raises(OverflowError) as by_columns:
        encode_values(late)
    assert str(by_columns.value) == str(by_rows.value)
