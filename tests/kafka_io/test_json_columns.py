"""Vectorized JSON decoding: the fast path changes speed, never output.

The contract of :func:`decode_columns`: for any chunk of values it either returns None (the
caller decodes record by record) or returns exactly the columns the per-record decoder
(``RecordDecoder._decode``) produces, which then accepts every value of the chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from barrierflow.kafka_io.decoding import RecordDecoder, _Invalid
from barrierflow.kafka_io.json_columns import decode_columns
from barrierflow.spec.models import KafkaSourceSpec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIELDS = {"key": "string", "n": "long", "x": "double", "ok": "boolean", "at": "timestamp"}


@dataclass
class Record:
    """The parts of a Kafka record the decoder reads."""

    value: bytes | None
    topic: str = "t"
    partition: int = 0
    offset: int = 0
    timestamp: int = 1_700_000_000_000
    headers: list[tuple[str, bytes]] | None = None


def _decoder(fields: dict[str, str] = FIELDS) -> RecordDecoder:
    return RecordDecoder(KafkaSourceSpec.model_validate(
        {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topics": ["t"], "format": "json",
         "json_fields": fields}))


def _per_record(values: list[bytes | None], fields: dict[str, str] = FIELDS) -> list[list[Any]] | None:
    """Rows of the per-record decoder, or None when it refuses any value."""
    decoder = _decoder(fields)
    rows = []
    for value in values:
        try:
            rows.append(decoder._decode(Record(value)))
        except _Invalid:
            return None
    return rows


def _fast(values: list[bytes | None], fields: dict[str, str] = FIELDS) -> list[list[Any]] | None:
    columns = decode_columns(values, fields)
    if columns is None:
        return None
    as_lists = []
    for column, kind in zip(columns, fields.values(), strict=True):
        if kind == "timestamp":
            column = column.cast("int64")
        as_lists.append(column.to_pylist())
    return [list(row) for row in zip(*as_lists, strict=True)]


GOOD = json.dumps({"key": "k", "n": 7, "x": 1.5, "ok": True, "at": "2026-01-02T03:04:05.123456+01:00",
                   "extra": [1, {"y": None}]}).encode()


def test_a_chunk_of_good_values_decodes_to_the_per_record_rows() -> None:
    values = [GOOD, json.dumps({"key": "é\u0000\"", "n": -(2**63), "x": 3, "ok": False,
                                "at": 1_700_000_000_123}).encode()]
    # 'at' mixes a string and a number: Arrow cannot read that column in one type
    assert _fast(values) is None
    values = [GOOD, json.dumps({"key": "é\u0000\"", "n": 2**63 - 1, "x": 3, "ok": False,
                                "at": "2026-01-02"}).encode()]
    assert _fast(values) == _per_record(values)
    assert _fast(values) is not None
    millis = [json.dumps({"key": "a", "n": 1, "x": 0.1, "ok": True, "at": ms}).encode()
              for ms in (0, -1, 253_402_300_799_999)]
    assert _fast(millis) == _per_record(millis)
    assert _fast(millis) is not None


MALFORMED = {
    "tombstone": None,
    "not JSON": b"{not json",
    "array": b"[1, 2]",
    "scalar": b"42",
    "leading whitespace": b'  {"key": "k", "n": 1, "x": 1, "ok": true, "at": 0}',
    "byte order mark": b'\xef\xbb\xbf{"key": "k", "n": 1, "x": 1, "ok": true, "at": 0}',
    "pretty-printed": b'{"key": "k",\n "n": 1, "x": 1, "ok": true, "at": 0}',
    "carriage return": b'{"key": "k",\r "n": 1, "x": 1, "ok": true, "at": 0}',
    "two objects": b'{"key": "k", "n": 1, "x": 1, "ok": true, "at": 0} {"key": "k"}',
    "missing field": b'{"key": "k", "x": 1, "ok": true, "at": 0}',
    "null field": b'{"key": "k", "n": null, "x": 1, "ok": true, "at": 0}',
    "long as float": b'{"key": "k", "n": 1.0, "x": 1, "ok": true, "at": 0}',
    "long too big": b'{"key": "k", "n": 9223372036854775808, "x": 1, "ok": true, "at": 0}',
    "string as number": b'{"key": 5, "n": 1, "x": 1, "ok": true, "at": 0}',
    "boolean as number": b'{"key": "k", "n": 1, "x": 1, "ok": 1, "at": 0}',
    "key given twice": b'{"key": "k", "n": 1, "n": 2, "x": 1, "ok": true, "at": 0}',
    "bad UTF-8 in an unused field": b'{"key": "k", "n": 1, "x": 1, "ok": true, "at": 0, "z": "\xff"}',
    "not a timestamp": b'{"key": "k", "n": 1, "x": 1, "ok": true, "at": "yesterday"}',
    "timestamp past 9999": b'{"key": "k", "n": 1, "x": 1, "ok": true, "at": 253402300800000}',
    "double too big": b'{"key": "k", "n": 1, "x": 1e400, "ok": true, "at": 0}',
}


@pytest.mark.parametrize("reason", sorted(MALFORMED))
def test_one_odd_value_sends_the_chunk_to_the_per_record_path_with_the_same_output(reason: str) -> None:
    values = [GOOD, MALFORMED[reason], GOOD]
    assert decode_columns(values, FIELDS) is None
    decoder = _decoder()
    batches = list(decoder.batches([Record(v, offset=i) for i, v in enumerate(values)]))
    rows = [row for batch in batches for row in batch.to_pylist()]
    accepted = _per_record([MALFORMED[reason]]) is not None
    assert [r["offset"] for r in rows] == ([0, 1, 2] if accepted else [0, 2])
    assert [d["offset"] for d in decoder.dead_letters] == ([] if accepted else [1])


def test_the_decoder_batch_is_the_same_on_both_paths() -> None:
    values = [json.dumps({"key": f"k{i}", "n": i, "x": i / 3, "ok": i % 2 == 0,
                          "at": f"2026-01-01T00:00:{i:02d}Z"}).encode() for i in range(50)]
    fast = list(_decoder().batches([Record(v, offset=i) for i, v in enumerate(values)]))
    slow = list(_decoder().batches([Record(v, offset=i) for i, v in enumerate([*values, b"{bad"])]))
    assert len(fast) == len(slow) == 1
    assert fast[0].schema == slow[0].schema
    assert fast[0].to_pylist() == slow[0].to_pylist()
    assert datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC) == fast[0].to_pylist()[3]["at"]


_json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64)
                 | st.floats(allow_nan=False) | st.text(max_size=8)
                 | st.sampled_from(["2026-01-02T03:04:05", "2026-01-02 03:04:05.5-02:00", "2026-13-01", "20260102"]))
_objects = st.fixed_dictionaries(
    {}, optional={name: _json_scalars for name in FIELDS} | {"other": _json_scalars})
_values = (_objects.map(lambda o: json.dumps(o).encode())
           | _objects.map(lambda o: json.dumps(o, ensure_ascii=False, indent=1).encode())
           | st.binary(max_size=12) | st.none())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_values, min_size=1, max_size=6), st.sampled_from([FIELDS, {"n": "long"}, {"at": "timestamp"},
                                                                    {"x": "double", "key": "string"}]))
def test_the_fast_path_either_declines_or_agrees_with_the_per_record_decoder(
        values: list[bytes | None], fields: dict[str, str]) -> None:
    fast = _fast(values, fields)
    if fast is not None:
        assert fast == _per_record(values, fields)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"key": st.text(max_size=8), "n": st.integers(-(2**63), 2**63 - 1),
                                       "x": st.floats(allow_nan=False, allow_infinity=False),
                                       "ok": st.booleans(),
                                       "at": st.integers(-253_402_300_799_999, 253_402_300_799_999)}),
                min_size=1, max_size=6))
def test_well_formed_values_take_the_fast_path(objects: list[dict[str, Any]]) -> None:
    values = [json.dumps(o).encode() for o in objects]
    fast = _fast(values)
    assert fast is not None
    assert fast == _per_record(values)


_digits = st.text(alphabet="0123456789", min_size=1, max_size=1)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9999), st.integers(0, 19), st.integers(0, 39), st.integers(0, 29),
                          st.integers(0, 69), st.integers(0, 69), st.text("0123456789", max_size=7),
                          st.sampled_from(["", "Z", "+01:00", "-23:59", "+24:00", "-00:00", "+1:00"]),
                          st.sampled_from(["T", " "])),
                min_size=1, max_size=4))
def test_iso_timestamps_read_by_arrow_agree_with_fromisoformat(
        parts: list[tuple[int, int, int, int, int, int, str, str, str]]) -> None:
    texts = [f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{'.' + frac if frac else ''}{zone}"
             for y, mo, d, h, mi, s, frac, zone, sep in parts]
    values = [json.dumps({"at": text}).encode() for text in texts]
    fast = _fast(values, {"at": "timestamp"})
    if fast is not None:
        assert fast == _per_record(values, {"at": "timestamp"})
    elif all(zone == "" for *_, zone, _ in parts) or all(zone != "" for *_, zone, _ in parts):
        assert _per_record(values, {"at": "timestamp"}) is None


def test_records_of_a_topic_carrying_fewer_fields_get_nulls_for_the_others() -> None:
    """A stage reading channels with different fields: each topic's records must carry its own
    fields (a missing one is a dead letter), the others are null in its rows."""
    spec = KafkaSourceSpec.model_validate(
        {"type": "kafka", "bootstrap_servers": "127.0.0.1:1", "topics": ["a", "b"], "format": "json",
         "json_fields": {"key": "long", "value": "long", "amount": "double"},
         "topic_fields": {"a": ["key", "value"], "b": ["key", "amount"]}})
    records = [Record(b'{"key": 1, "value": 10}', topic="a", offset=0),
               Record(b'{"key": 2, "amount": 2.5}', topic="b", offset=0),
               Record(b'{"key": 3, "value": 30, "amount": 9.5}', topic="b", offset=1),
               Record(b'{"key": 4, "amount": 4.5}', topic="a", offset=1)]
    for vectorized in (True, False):
        decoder = RecordDecoder(spec, vectorized=vectorized)
        rows = [r for batch in decoder.batches(records) for r in batch.to_pylist()]
        assert [(r["topic"], r["key"], r["value"], r["amount"]) for r in rows] == [
            ("a", 1, 10, None), ("b", 2, None, 2.5), ("b", 3, None, 9.5)]
        assert [(d["partition"], d["offset"]) for d in decoder.dead_letters] == [("a:0", 1)]
        assert "field 'value' is missing" in decoder.dead_letters[0]["reason"]


def test_records_read_as_columns_decode_to_the_same_batches_and_dead_letters() -> None:
    """The Kafka source reads ``json`` ranges as columns (offsets, timestamps, values): the
    batches and dead letters equal those of the record-by-record path, malformed values and
    records without a timestamp included."""
    from barrierflow.kafka_io.consumer import Columns

    values = [json.dumps({"key": f"k{i}", "n": i, "x": 0.5, "ok": True, "at": i}).encode() for i in range(30)]
    stamps: list[int | None] = [1_700_000_000_000 + i for i in range(30)]
    stamps[3], stamps[4] = None, -1
    for odd in (None, b"{bad"):
        chunk = list(values)
        if odd is not None:
            chunk[7] = odd
        records = [Record(v, topic="t", partition=2, offset=10 + i, timestamp=stamps[i])  # type: ignore[arg-type]
                   for i, v in enumerate(chunk)]
        by_record, by_column = _decoder(), _decoder()
        expected = [b.to_pylist() for b in by_record.batches(records)]
        columns = [Columns([10 + i for i in range(15)], stamps[:15], chunk[:15]),
                   Columns([10 + i for i in range(15, 30)], stamps[15:], chunk[15:])]
        got = [b.to_pylist() for b in by_column.column_batches("t", 2, columns)]
        assert got == expected
        assert by_column.dead_letters == by_record.dead_letters
        assert got[0][3]["timestamp"] is None and got[0][4]["timestamp"] is None
