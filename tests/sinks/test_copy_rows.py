"""A PostgreSQL sink's micro-batches written ahead as COPY input (CSV): the encoding gives the
rows back exactly, and PostgreSQL stores from it exactly what it stores from psycopg's per-row
COPY of the same rows (the path it replaces), on seeded random rows with real text."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest
from barrierflow.sinks.copy_rows import (
    COPY_COLUMN,
    ROWS_COLUMN,
    decoded,
    encodable,
    encoded_copy_rows,
    fits,
    is_encoded,
    row_count,
    row_schema,
)

#: Text that CSV and COPY treat specially, multi-byte UTF-8, characters outside the BMP.
TEXTS = ["", "NULL", "\\N", "\\.", "a,b", 'say "hi"', "two\nlines", "cr\r\nlf", " lead", "trail ", "\t",
         "Zürich", "naïve café", "日本語のテキスト", "😀 emoji 🎉", "Ωμέγα", "\\", "'single'"]
FLOATS = [0.0, -0.0, 0.1, 1 / 3, 1e300, -1e-300, 5e-324, float("nan"), float("inf"), float("-inf"), 123456789.123456789]

SCHEMA = pa.schema([
    ("id", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("r", pa.float32()), ("ok", pa.bool_()),
    ("small", pa.int16()), ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")),
    ("local", pa.timestamp("us")), ("amount", pa.decimal128(12, 3)),
])


def random_rows(seed: int, n: int) -> pa.Table:
    """``n`` seeded random rows of :data:`SCHEMA`, about one value in eight null, in record batches
    of uneven sizes."""
    rnd = random.Random(seed)

    def maybe(value: object) -> object:
        return None if rnd.random() < 0.125 else value

    def text() -> str:
        if rnd.random() < 0.5:
            return rnd.choice(TEXTS)
        ranges = [(0x20, 0x7E), (0xA0, 0xD7FF), (0x10000, 0x1F9FF)]  # ASCII, the BMP without surrogates, beyond
        return "".join(chr(rnd.randint(*rnd.choice(ranges))) for _ in range(rnd.randint(0, 12)))

    base = datetime(2026, 1, 1, tzinfo=UTC)
    local = datetime(2026, 6, 1, tzinfo=UTC).replace(tzinfo=None)  # a timestamp without a time zone
    columns = {
        "id": list(range(n)),
        "s": [maybe(text()) for _ in range(n)],
        "f": [maybe(rnd.choice(FLOATS) if rnd.random() < 0.3 else rnd.uniform(-1e6, 1e6)) for _ in range(n)],
        "r": [maybe(rnd.uniform(-1e3, 1e3)) for _ in range(n)],
        "ok": [maybe(rnd.random() < 0.5) for _ in range(n)],
        "small": [maybe(rnd.randint(-32768, 32767)) for _ in range(n)],
        "day": [maybe(date(2026, 1, 1) + timedelta(days=rnd.randint(-700_000, 700_000))) for _ in range(n)],
        "at": [maybe(base + timedelta(microseconds=rnd.randint(-10**15, 10**15))) for _ in range(n)],
        "local": [maybe(local + timedelta(microseconds=rnd.randint(-10**15, 10**15))) for _ in range(n)],
        "amount": [maybe(Decimal(rnd.randint(-10**11, 10**11)) / 1000) for _ in range(n)],
    }
    table = pa.table(columns, schema=SCHEMA)
    cuts = sorted(rnd.sample(range(1, n), 3)) if n > 4 else []
    bounds = [0, *cuts, n]
    batches = [b for lo, hi in itertools.pairwise(bounds) for b in table.slice(lo, hi - lo).to_batches()]
    return pa.Table.from_batches(batches, schema=SCHEMA)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_copy_input_decodes_to_exactly_the_rows_it_encodes(seed: int) -> None:
    rows = random_rows(seed, 500)
    encoded = encoded_copy_rows(rows)
    assert is_encoded(encoded) and encoded.column_names == [COPY_COLUMN, ROWS_COLUMN]
    assert encoded.num_rows == len(rows.to_batches())  # one chunk per record batch
    assert row_count(encoded) == 500 and row_count(rows) == 500
    assert row_schema(encoded) == SCHEMA
    back = decoded(encoded)
    assert back.schema == SCHEMA
    assert repr(back.to_pylist()) == repr(rows.to_pylist())  # NaN, -0.0, '' against null: by repr


def test_empty_and_null_strings_stay_apart() -> None:
    rows = pa.table({"s": pa.array(["", None, "x"], pa.string())})
    assert encoded_copy_rows(rows).column(COPY_COLUMN)[0].as_py() == b'""\n\n"x"\n'
    assert decoded(encoded_copy_rows(rows)).column("s").to_pylist() == ["", None, "x"]


def test_columns_of_other_types_keep_the_batch_as_rows() -> None:
    assert encodable(SCHEMA)
    for other in (pa.binary(), pa.list_(pa.int64()), pa.struct([("a", pa.int64())]), pa.timestamp("ns"),
                  pa.duration("us"), pa.time64("us"), pa.map_(pa.string(), pa.int64()), pa.float16()):
        assert not encodable(pa.schema([("id", pa.int64()), ("other", other)])), other
    assert not encodable(pa.schema([]))


def test_which_column_types_read_the_csv_text_as_psycopgs() -> None:
    assert fits(pa.string(), "jsonb") and fits(pa.string(), "text")
    assert fits(pa.int32(), "int8") and fits(pa.int64(), "numeric") and fits(pa.float64(), "float4")
    assert fits(pa.timestamp("us", tz="UTC"), "timestamptz") and fits(pa.date32(), "timestamp")
    # the texts differ ('true' against 't', 'inf' against 'Infinity', '+0000' against '+00:00')
    assert not fits(pa.bool_(), "text") and not fits(pa.float64(), "text")
    assert not fits(pa.timestamp("us", tz="UTC"), "text") and not fits(pa.timestamp("us"), "date")
    # 1.0 is '1.0' to psycopg (refused by an integer column) and '1' in CSV (accepted)
    assert not fits(pa.float64(), "int8")
