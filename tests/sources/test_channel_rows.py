"""A channel's row batches decoded into the reading stage's rows (no Spark, no broker): the
same rows, types and dead letters as one JSON object per record would give, JSON records of
channels written before row batches still read, and a record that is not a row batch a dead
letter, never an exception."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.kafka_io.consumer import Columns, Record
from barrierflow.kafka_io.row_batches import MAX_BYTES, MAX_ROWS, by_partition, decode, encode, is_row_batch, split
from barrierflow.sources.channel_rows import ChannelDecoder
from barrierflow.spec.models import KafkaSourceSpec

FIELDS = {"key": "long", "value": "double", "name": "string", "ok": "boolean", "at": "timestamp"}


def _spec(fields: dict[str, str] | None = None) -> KafkaSourceSpec:
    return KafkaSourceSpec(name="in", type="kafka", bootstrap_servers="127.0.0.1:9", topics=["ch"], format="json",
                           json_fields=fields or FIELDS)


def _batch(**columns: Any) -> pa.RecordBatch:
    base: dict[str, Any] = {
        "key": pa.array([1, 2, 3], type=pa.int32()),
        "value": pa.array([0.5, 2, 3], type=pa.float32()),
        "name": ["a", "b", "é"],
        "ok": [True, False, True],
        "at": pa.array([1_700_000_000_000_000] * 3, type=pa.timestamp("us", tz="Europe/Paris")),
        "extra": [[1], [], [2]],
    }
    base.update(columns)
    return pa.RecordBatch.from_pydict(base)


def _rows(decoder: ChannelDecoder, values: list[bytes], first_offset: int = 10) -> list[dict[str, Any]]:
    columns = Columns(list(range(first_offset, first_offset + len(values))), [1_000] * len(values), values)
    return [row for batch in decoder.column_batches("ch", 0, [columns]) for row in batch.to_pylist()]


def test_a_row_batch_round_trips_and_is_told_from_json() -> None:
    batch = _batch()
    value = encode(batch)
    assert is_row_batch(value) and not is_row_batch(b'{"key": 1}') and not is_row_batch(None)
    assert decode(value).equals(batch)


def test_rows_are_split_by_count_and_size_and_grouped_by_partition_in_order() -> None:
    wide = pa.RecordBatch.from_pydict({"s": ["x" * 1000] * 2000})
    pieces = split(wide)
    assert sum(p.num_rows for p in pieces) == 2000 and all(p.nbytes <= MAX_BYTES * 1.1 for p in pieces)
    assert [r for p in pieces for r in p.column(0).to_pylist()] == wide.column(0).to_pylist()
    many = pa.RecordBatch.from_pydict({"n": list(range(MAX_ROWS * 2 + 5))})
    assert [p.num_rows for p in split(many)] == [MAX_ROWS, MAX_ROWS, 5]
    assert split(many.slice(0, 0)) == []
    rows = pa.RecordBatch.from_pydict({"n": list(range(10))})
    parts = dict(by_partition(rows, [1, 0, 1, 2, 0, 1, 1, 2, 0, 0]))
    assert {p: b.column(0).to_pylist() for p, b in parts.items()} == {0: [1, 4, 8, 9], 1: [0, 2, 5, 6], 2: [3, 7]}
    assert list(dict(by_partition(rows, [3] * 10))) == [3]


def test_a_row_batch_gives_the_rows_and_types_json_would_give() -> None:
    decoder = ChannelDecoder(_spec())
    rows = _rows(decoder, [encode(_batch())])
    assert decoder.dead_letters == []
    at = datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert [(r["key"], r["value"], r["name"], r["ok"], r["at"]) for r in rows] == [
        (1, 0.5, "a", True, at), (2, 2.0, "b", False, at), (3, 3.0, "é", True, at)]
    assert {(r["topic"], r["partition"], r["offset"]) for r in rows} == {("ch", 0, 10)}  # the record's offset


@pytest.mark.parametrize(("column", "bad_rows", "reason"), [
    (pa.array([1, None, 3], type=pa.int64()), [1], "field 'key' is null"),
    (pa.array(["1", "2", "3"]), [0, 1, 2], "field 'key' should be long"),
    (pa.array([1.0, 2.5, 3.0]), [0, 1, 2], "field 'key' should be long"),
])
def test_rows_json_would_refuse_become_dead_letters_and_the_others_are_kept(
        column: pa.Array, bad_rows: list[int], reason: str) -> None:
    decoder = ChannelDecoder(_spec({"key": "long", "name": "string"}))
    rows = _rows(decoder, [encode(_batch(key=column))])
    assert [r["name"] for r in rows] == [n for i, n in enumerate(["a", "b", "é"]) if i not in bad_rows]
    assert len(decoder.dead_letters) == len(bad_rows)
    assert all(reason in d["reason"] and d["offset"] == 10 for d in decoder.dead_letters), decoder.dead_letters


def test_a_missing_field_and_a_nan_go_the_json_way() -> None:
    decoder = ChannelDecoder(_spec({"key": "long", "missing": "string"}))
    assert _rows(decoder, [encode(_batch())]) == []
    assert len(decoder.dead_letters) == 3 and "field 'missing' is missing" in decoder.dead_letters[0]["reason"]
    decoder = ChannelDecoder(_spec({"key": "long", "value": "double"}))
    rows = _rows(decoder, [encode(_batch(value=pa.array([1.0, float("nan"), 2.0])))])
    assert [r["key"] for r in rows] == [1, 3] and len(decoder.dead_letters) == 1


def test_json_records_of_older_channels_still_read_in_order_beside_row_batches() -> None:
    decoder = ChannelDecoder(_spec({"key": "long", "name": "string"}))
    values = [b'{"key": 7, "name": "old"}', encode(_batch()), b'{"key": 8, "name": "older"}', b"not json"]
    rows = _rows(decoder, values)
    assert [(r["offset"], r["key"]) for r in rows] == [(10, 7), (11, 1), (11, 2), (11, 3), (12, 8)]
    assert [d["offset"] for d in decoder.dead_letters] == [13]
    records = [Record("ch", 0, 10 + i, 1_000, None, v, ()) for i, v in enumerate(values)]
    again = ChannelDecoder(_spec({"key": "long", "name": "string"}))
    assert [r["key"] for b in again.batches(records) for r in b.to_pylist()] == [7, 1, 2, 3, 8]


def test_an_unreadable_row_batch_is_one_dead_letter_naming_the_record() -> None:
    decoder = ChannelDecoder(_spec({"key": "long"}))
    assert _rows(decoder, [b"\xff\xff\xff\xff garbage"], first_offset=42) == []
    (letter,) = decoder.dead_letters
    assert letter["offset"] == 42 and letter["partition"] == "ch:0" and "Arrow row batch" in letter["reason"]


def test_a_peek_sees_the_first_row_of_a_row_batch() -> None:
    decoder = ChannelDecoder(_spec({"key": "long"}), first_rows=True)
    assert [r["key"] for r in _rows(decoder, [encode(_batch())])] == [1]


def test_a_corrupt_row_count_header_is_an_error_naming_the_record() -> None:
    from barrierflow.errors import SourceError
    from barrierflow.kafka_io.row_batches import rows_header, rows_in

    assert rows_in([rows_header(12)]) == 12 and rows_in([("bf-attempt", b"0")]) == 1
    with pytest.raises(SourceError, match=r"ch:0 offset 7: header 'bf-rows' is b'x1'"):
        rows_in([("bf-rows", b"x1")], "ch:0 offset 7")
