"""The generator: deterministic records per offset range, malformed records to dead letters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from barrierflow.barriers.control import ControlChannel
from barrierflow.sources.dead_letter import count_dead_letters, read_dead_letters
from barrierflow.sources.generator import GeneratorModel, GeneratorStreamReader
from barrierflow.spec.models import GeneratorSourceSpec


def _reader(tmp_path: Path, **fields: object) -> GeneratorStreamReader:
    spec = GeneratorSourceSpec(type="generator", **fields)
    return GeneratorStreamReader({
        "spec": spec.model_dump_json(),
        "control_dir": str(tmp_path / "control"),
        "dead_letter_uri": f"file://{tmp_path / 'dlq'}",
    })


def _rows(reader: GeneratorStreamReader, start: dict, end: dict) -> list[tuple]:
    return [tuple(r.values()) for part in reader.partitions(start, end)
            for batch in reader.read(part) for r in batch.to_pylist()]


def test_rereading_a_range_gives_identical_rows(tmp_path: Path) -> None:
    reader = _reader(tmp_path, partitions=3, rows_per_second=0, max_records_per_batch=1000, keys=37)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    first, second = _rows(reader, start, end), _rows(reader, start, end)
    assert first == second and len(first) == 3000
    # A fresh reader (another process after a restart) reads the same rows too.
    assert _rows(_reader(tmp_path, partitions=3, rows_per_second=0, max_records_per_batch=1000, keys=37),
                 start, end) == first


def test_record_function(tmp_path: Path) -> None:
    spec = GeneratorSourceSpec(type="generator", partitions=2, rows_per_second=10, keys=7,
                               event_time_skew_ms=[0, 500], event_time_start="2026-01-01T00:00:00+00:00")
    rows = GeneratorModel(spec).rows(1, 3, 5)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    assert rows == [
        (1, 3, (3 * 2 + 1) % 7, ((3 * 2 + 1) * 2654435761) % 1000, t0 + timedelta(milliseconds=500 + 300)),
        (1, 4, (4 * 2 + 1) % 7, ((4 * 2 + 1) * 2654435761) % 1000, t0 + timedelta(milliseconds=500 + 400)),
    ]
    assert GeneratorModel(spec).max_event_time(1, 5) == t0 + timedelta(milliseconds=900)
    assert GeneratorModel(spec).max_event_time(0, 0) is None


def test_barrier_request_is_written_into_the_offset(tmp_path: Path) -> None:
    reader = _reader(tmp_path, partitions=1, rows_per_second=0, max_records_per_batch=10)
    control = ControlChannel(tmp_path / "control")
    control.reset()
    start = reader.initialOffset()
    assert reader.latestOffset(start, None) == {"partitions": {"0": 10}, "barrier": 0}
    triggered = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    control.request_barrier(1, triggered)
    end = reader.latestOffset(start, None)
    assert end == {"partitions": {"0": 10}, "barrier": 1, "barrier_triggered_ms": round(triggered.timestamp() * 1000)}
    assert reader.latestOffset(end, None)["barrier"] == 1  # sticky, injected once
    control.set_hold(True)
    assert reader.latestOffset(end, None) == end


def test_malformed_records_go_to_dead_letters_with_a_count(tmp_path: Path) -> None:
    reader = _reader(tmp_path, partitions=2, rows_per_second=0, max_records_per_batch=100, malformed_every=10)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    rows = _rows(reader, start, end)
    assert len(rows) == 180 and all((r[1] + 1) % 10 != 0 for r in rows)
    _rows(reader, start, end)  # a replay overwrites, it does not duplicate
    assert count_dead_letters(f"file://{tmp_path / 'dlq'}") == 20
    letter = read_dead_letters(f"file://{tmp_path / 'dlq'}")[0]
    assert letter["offset"] == 9 and "malformed" in letter["reason"]


def test_rate_limited_availability_grows_with_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("barrierflow.sources.generator.time.monotonic", lambda: clock[0])
    reader = _reader(tmp_path, partitions=2, rows_per_second=100, partition_rate_factors=[1.0, 0.5])
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["partitions"] == {"0": 0, "1": 0}
    clock[0] += 2.0
    assert reader.latestOffset(start, None)["partitions"] == {"0": 200, "1": 100}


def test_offset_at_inverts_the_event_time_model() -> None:
    from datetime import timedelta

    from barrierflow.sources.generator import GeneratorModel
    from barrierflow.spec.models import GeneratorSourceSpec

    for step in (None, 100.0, 0.3):
        model = GeneratorModel(GeneratorSourceSpec(type="generator", partitions=2, rows_per_second=0,
                                                   event_time_step_ms=step, event_time_skew_ms=[0, -600_000]))
        for p in (0, 1):
            for end in (1, 2, 7, 1000, 12345):
                last = model.max_event_time(p, end)
                assert last is not None
                assert model.offset_at(p, last) == end
                assert model.offset_at(p, last - timedelta(microseconds=1)) == end - 1
        assert model.offset_at(1, model.max_event_time(0, 1)) > 0


@pytest.mark.spark
def test_a_batch_read_of_an_event_time_range_with_no_record_is_empty(spark: object) -> None:
    """The stream-vs-batch comparison re-reads the generator over an event-time range; a range
    before the first or after the last record has no offsets in any partition, and Spark then
    reads one partition without a value: no rows, not an error."""
    from barrierflow.batch.source_records import offset_ranges, source_records
    from barrierflow.spec import parse_spec

    spec = parse_spec({"version": 1, "name": "g", "work_dir": "/tmp/g",
                       "sources": [{"name": "events", "type": "generator", "partitions": 2,
                                    "records_per_partition": 50}],
                       "transformation": {"function": "barrierflow.transforms.projection:project"},
                       "sinks": [{"name": "lake", "type": "parquet", "path": "file:///tmp/g/lake"}],
                       "checkpoint": {"storage": "file:///tmp/g/chk"}})
    model = GeneratorModel(spec.source)
    first = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=model.event_time_us(0, 0))
    before = (first - timedelta(hours=2), first - timedelta(hours=1))
    assert all(start == end for start, end in offset_ranges(spec.source, *before).values())
    assert source_records(spark, spec, *before).count() == 0
    assert source_records(spark, spec, None, first + timedelta(days=1)).count() == 100
