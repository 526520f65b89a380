"""The Kafka benchmarks' realistic records: deterministic, about 30 % with non-ASCII text, the
job's fields as the plain records have them, and all read by barrierflow's JSON decoder itself
(what the benchmark's fallback rate reports)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.json_records import fallback_rate, values


def test_realistic_records_are_deterministic_and_hold_non_ascii_text_in_about_30_percent() -> None:
    realistic = values(3000, 1000, "realistic")
    assert values(300, 1000, "realistic") == realistic[:300]  # a prefix of the records is the topic's prefix
    texts = [json.loads(v) for v in realistic]
    assert [(t["key"], t["value"]) for t in texts] == [(i % 1000, i) for i in range(3000)]
    non_ascii = sum(1 for t in texts if not all(str(t[f]).isascii() for f in ("name", "comment")))
    assert 0.25 < non_ascii / 3000 < 0.35, non_ascii
    assert sum(1 for v in realistic if b"\\u" in v) > 30  # some written with escapes
    assert values(2, 1000) == [b'{"key":0,"value":0,"event_time":"2026-01-01T00:00:00.001000Z"}',
                               b'{"key":1,"value":1,"event_time":"2026-01-01T00:00:00.001000Z"}']
    with pytest.raises(ValueError, match="--text takes plain or realistic"):
        values(1, 1, "emoji")


def test_the_decoder_reads_every_realistic_record_itself_and_counts_what_it_leaves(spark: Any) -> None:
    fields = {"key": "BIGINT", "value": "BIGINT", "event_time": "STRING", "name": "STRING", "comment": "STRING"}
    assert fallback_rate(spark, values(2000, 1000, "realistic"), fields) == 0.0
    assert fallback_rate(spark, [b'{"key":1}', b'{"key":"\xff"}', b'{"key":1,"key":2}', b"[]"], fields) == 0.75
