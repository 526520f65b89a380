"""The per-range event-time index (what Kafka checkpoints record as max_event_time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from barrierflow.sources.event_times import EventTimeIndex, record_range

T0 = datetime(2026, 11, 22, tzinfo=UTC)


def test_newest_event_time_before_an_offset_folds_ranges_and_stays_small(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    record_range(uri, "events", "t:0", 0, 10, T0 + timedelta(seconds=5), 10)
    record_range(uri, "events", "t:0", 10, 20, T0 + timedelta(seconds=3), 10)  # older data arriving later
    record_range(uri, "events", "t:0", 20, 30, T0 + timedelta(seconds=9), 10)
    record_range(uri, "events", "t:0", 30, 35, None, 0)  # no record had an event time
    index = EventTimeIndex(uri, "events")
    assert index.max_event_time("t:0", 20) == T0 + timedelta(seconds=5)  # the range ending at 30 is after
    assert sorted(p.name for p in (tmp_path / "source=events" / "partition=t:0").iterdir()) == [
        "00000000000000000020-00000000000000000030.json", "00000000000000000030-00000000000000000035.json",
        "_summary.json"]  # folded ranges are gone
    assert index.max_event_time("t:0", 35) == T0 + timedelta(seconds=9)
    assert index.max_event_time("t:0", 35) == T0 + timedelta(seconds=9)  # asking again: same answer
    assert index.max_event_time("t:1", 50) is None  # nothing known about that partition


def test_an_offset_before_the_folded_range_is_unknown_not_wrong(tmp_path: Path) -> None:
    """After a restore to an older checkpoint the summary holds newer records: no answer."""
    uri = f"file://{tmp_path}"
    record_range(uri, "events", "t:0", 0, 10, T0, 10)
    record_range(uri, "events", "t:0", 10, 20, T0 + timedelta(seconds=1), 10)
    index = EventTimeIndex(uri, "events")
    assert index.max_event_time("t:0", 20) == T0 + timedelta(seconds=1)
    assert index.max_event_time("t:0", 10) is None
    record_range(uri, "events", "t:0", 20, 25, T0 + timedelta(seconds=2), 5)  # the job moves on
    assert index.max_event_time("t:0", 25) == T0 + timedelta(seconds=2)


def test_an_unreadable_record_makes_the_event_time_unknown_not_a_crash(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    record_range(uri, "events", "t:0", 0, 10, T0, 10)
    (tmp_path / "source=events" / "partition=t:0" / f"{10:020d}-{20:020d}.json").write_text("{trunc")
    assert EventTimeIndex(uri, "events").max_event_time("t:0", 20) is None
    (tmp_path / "source=events" / "partition=t:1").mkdir()
    (tmp_path / "source=events" / "partition=t:1" / "_summary.json").write_text("[]")
    assert EventTimeIndex(uri, "events").max_event_time("t:1", 20) is None
