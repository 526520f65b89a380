"""The barrier record codec: headers in, barrier out; malformed barriers are errors."""

from __future__ import annotations

import json

import pytest
from barrierflow.barriers.records import (
    BarrierMarker,
    BarrierRecordError,
    data_headers,
    decode_barrier,
    record_attempt,
)


def test_round_trip_through_headers_and_value() -> None:
    marker = BarrierMarker(7, 2, "enrich")
    assert marker.headers() == [("bf-barrier", b"7"), ("bf-attempt", b"2"), ("bf-stage", b"enrich")]
    assert decode_barrier(marker.headers()) == marker
    assert json.loads(marker.value()) == {"barrier": 7, "attempt": 2, "stage": "enrich"}
    # other headers around the barrier's do not matter
    assert decode_barrier([("trace", b"x"), *reversed(marker.headers())]) == marker
    # with the checkpoint's trigger time (optional; not part of which barrier it is)
    timed = BarrierMarker(7, 2, "enrich", 1_795_000_000_123)
    assert timed.headers()[-1] == ("bf-triggered-ms", b"1795000000123")
    decoded = decode_barrier(timed.headers())
    assert decoded == marker and decoded is not None and decoded.triggered_ms == 1_795_000_000_123
    assert json.loads(timed.value())["triggered_ms"] == 1_795_000_000_123


def test_data_records_are_not_barriers() -> None:
    assert decode_barrier(None) is None
    assert decode_barrier([]) is None
    assert decode_barrier(data_headers(3)) is None
    assert record_attempt(data_headers(3)) == 3
    assert record_attempt([("other", b"1")]) is None
    assert record_attempt([("bf-attempt", b"x")]) is None


@pytest.mark.parametrize("headers", [
    [("bf-barrier", b"seven"), ("bf-attempt", b"0"), ("bf-stage", b"s")],
    [("bf-barrier", b"7"), ("bf-stage", b"s")],
    [("bf-barrier", b"7"), ("bf-attempt", b"0")],
    [("bf-barrier", b"0"), ("bf-attempt", b"0"), ("bf-stage", b"s")],
    [("bf-barrier", b"7"), ("bf-attempt", b"0"), ("bf-stage", b"s"), ("bf-triggered-ms", b"soon")],
])
def test_malformed_barrier_is_an_error_naming_the_record(headers: list[tuple[str, bytes]]) -> None:
    with pytest.raises(BarrierRecordError, match=r"flow\.ab:1 offset 42 is marked as a barrier"):
        decode_barrier(headers, where="flow.ab:1 offset 42")


def test_precedes_orders_by_attempt_then_checkpoint() -> None:
    assert BarrierMarker(9, 0, "a").precedes(BarrierMarker(1, 1, "a"))
    assert BarrierMarker(1, 1, "a").precedes(BarrierMarker(2, 1, "a"))
    assert not BarrierMarker(2, 1, "a").precedes(BarrierMarker(2, 1, "b"))


def test_attempt_cutoffs_mark_what_an_older_attempt_wrote_after_the_restored_barrier() -> None:
    from barrierflow.barriers.cutoffs import AttemptCutoff, StaleRecords

    # restore 1 (attempt 1): barrier at offset 10; restore 2 (attempt 2): barrier at offset 30
    stale = StaleRecords([AttemptCutoff(1, {"t:0": 10}),
                          AttemptCutoff.from_json({"attempt": 2, "offsets": {"t:0": 30}})])
    assert not stale.is_stale("t:0", 9, 0)  # before the restored barrier (e.g. channel state)
    assert stale.is_stale("t:0", 11, 0)  # attempt 0 after barrier: re-produced by attempt 1
    assert not stale.is_stale("t:0", 20, 1)  # attempt 1 before the second restore's barrier
    assert stale.is_stale("t:0", 31, 1) and stale.is_stale("t:0", 31, 0)
    assert not stale.is_stale("t:0", 31, 2) and not stale.is_stale("t:0", 99, None)
    assert not stale.is_stale("t:1", 99, 0)  # no cutoff for that partition
