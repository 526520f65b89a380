"""The bounded per-batch watermark history in the work dir."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from barrierflow.flow_control.watermark_history import HISTORY_FILE, BatchRecord, WatermarkHistory

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(i: int) -> BatchRecord:
    return BatchRecord(planned_at=T0 + timedelta(seconds=i), start={"0": i}, end={"0": i + 1}, barrier=i // 3,
                       watermarks={"0": T0 + timedelta(seconds=i), "1": None}, idle=["1"], paused=[],
                       pauses={"0": i}, paused_seconds={"0": i / 2}, cap=None if i % 2 else 4000)


def test_records_round_trip_and_are_found_by_end_offsets(tmp_path: Path) -> None:
    history = WatermarkHistory(tmp_path)
    for i in range(5):
        history.append(record(i))
    assert history.records() == [record(i) for i in range(5)]
    assert history.ending_at({"0": 3}) == record(2)
    assert history.ending_at({"0": 99}) is None
    assert history.latest() == record(4)


def test_history_is_bounded_and_keeps_the_newest(tmp_path: Path) -> None:
    history = WatermarkHistory(tmp_path, keep=3)
    for i in range(20):
        history.append(record(i))
        assert len((tmp_path / HISTORY_FILE).read_text().splitlines()) <= 6
    assert history.records()[-1] == record(19)
    assert len(history.records()) >= 3
    # a second writer (a restarted reader) counts the lines already there
    again = WatermarkHistory(tmp_path, keep=3)
    for i in range(20, 30):
        again.append(record(i))
    assert len((tmp_path / HISTORY_FILE).read_text().splitlines()) <= 6


def test_a_torn_line_is_skipped(tmp_path: Path) -> None:
    history = WatermarkHistory(tmp_path)
    history.append(record(0))
    with (tmp_path / HISTORY_FILE).open("a") as f:
        f.write('{"planned_at": "2026-01-01T00:0')
    assert history.records() == [record(0)]
    WatermarkHistory(tmp_path).append(record(1))  # a restarted writer ends the torn line first
    assert history.records() == [record(0), record(1)]
