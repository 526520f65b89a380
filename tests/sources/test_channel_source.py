"""The channel source's planning (``latestOffset``) and reading against a real broker, driven
by hand (no Spark): barrier records are found, partitions are capped (aligned) or recorded as
channel state (unaligned, timed out), barriers never reach the transformation."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.barriers.alignment.record import read_alignment
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.records import BarrierMarker, BarrierRecordError, data_headers, decode_barrier
from barrierflow.kafka_io.range_reads import read_range
from barrierflow.kafka_io.row_batches import encode, rows_header, rows_in
from barrierflow.sources.channel import ChannelStreamReader
from barrierflow.spec.models import KafkaSourceSpec
from pyspark.sql.datasource import InputPartition

from tests.support.kafka_broker import KafkaEndpoint, create_topic, produce

pytestmark = pytest.mark.kafka


def _row(i: int) -> tuple[None, bytes, list[tuple[str, bytes]]]:
    return None, json.dumps({"n": i}).encode(), data_headers(0)


def _barrier(n: int, triggered_ms: int | None = None) -> tuple[None, bytes, list[tuple[str, bytes]]]:
    marker = BarrierMarker(n, 0, "up", triggered_ms)
    return None, marker.value(), marker.headers()


def channel(endpoint: KafkaEndpoint, layout: dict[int, list[Any]]) -> str:
    """A 2-partition topic holding ``layout[p]``: ints are data rows, ``("B", n)`` barrier n
    (``("B", n, ms)``: triggered at epoch ``ms``)."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(endpoint, topic, 2)
    records = []
    for partition, items in layout.items():
        for item in items:
            key, value, headers = _barrier(*item[1:]) if isinstance(item, tuple) else _row(item)
            records.append((partition, key, value, headers))
    produce(endpoint, topic, records)
    return topic


def reader(endpoint: KafkaEndpoint, topic: str, tmp_path: Path, mode: str = "aligned", timeout: float = 0.0,
           max_records: int = 100) -> ChannelStreamReader:
    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=endpoint.bootstrap_servers, topics=[topic],
                           format="json", json_fields={"n": "long"}, max_records_per_batch=max_records,
                           poll_timeout=5)
    return ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                "alignment": json.dumps({"mode": mode, "alignment_timeout": timeout})})


def plan(source: ChannelStreamReader, start: dict[str, Any]) -> SourceOffset:
    return SourceOffset.from_json(source.latestOffset(start, None))


def test_aligned_caps_the_early_partition_until_the_late_one_delivers(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    # p0: 2 rows, barrier 1, 3 rows; p1: 6 rows, barrier 1.  Batches of at most 4 per partition.
    topic = channel(kafka_endpoint, {0: [0, 1, ("B", 1), 2, 3, 4], 1: [0, 1, 2, 3, 4, 5, ("B", 1)]})
    p0, p1 = f"{topic}:0", f"{topic}:1"
    source = reader(kafka_endpoint, topic, tmp_path, max_records=4)
    try:
        start = source.initialOffset()
        first = plan(source, start)
        assert first.partitions == {p0: 3, p1: 4} and first.barrier == 0  # p0 stops just after its barrier
        second = plan(source, first.to_json())
        assert second.partitions == {p0: 3, p1: 7} and second.barrier == 1  # p0 capped; p1 reaches its barrier
        record = read_alignment(tmp_path / "control", 1)
        assert record is not None and record["mode"] == "aligned" and record["channel_state"] == []
        assert record["barrier_offsets"] == {p0: 2, p1: 6}
        third = plan(source, second.to_json())
        assert third.partitions == {p0: 6, p1: 7} and third.barrier == 1  # released; sticky barrier
        # read() never hands a barrier record to the transformation
        rows = [r for batch in source.read(InputPartition((topic, 0, 0, 6))) for r in batch.to_pylist()]
        assert [r["n"] for r in rows] == [0, 1, 2, 3, 4]
    finally:
        source.stop()


def test_unaligned_snapshots_at_the_first_barrier_and_records_channel_state(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    topic = channel(kafka_endpoint, {0: [0, ("B", 1), 1], 1: [*range(9), ("B", 1), 9]})
    p0, p1 = f"{topic}:0", f"{topic}:1"
    source = reader(kafka_endpoint, topic, tmp_path, mode="unaligned", max_records=3)
    try:
        first = plan(source, source.initialOffset())
        assert first.partitions == {p0: 2, p1: 3} and first.barrier == 1  # snapshot batch at once
        # p1's barrier is already in the log, 6 records ahead: it overtakes them, so the
        # checkpoint's channel state is known before p1 processed its backlog.
        record = read_alignment(tmp_path / "control", 1)
        offset = first
        for _ in range(3):
            offset = plan(source, offset.to_json())
        assert offset.partitions == {p0: 3, p1: 11} and offset.barrier == 1  # passes the delivered barrier
        assert record is not None and record["mode"] == "unaligned" and record["alignment_ms"] == 0.0
        assert record["channel_state"] == [{"partition": p1, "start": 3, "end": 9, "records": 6, "back_edge": False}]
    finally:
        source.stop()


def test_alignment_timeout_switches_a_checkpoint_to_unaligned(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    topic = channel(kafka_endpoint, {0: [("B", 1), 0], 1: [0, 1, 2, 3, 4, 5, ("B", 1)]})
    p1 = f"{topic}:1"
    source = reader(kafka_endpoint, topic, tmp_path, timeout=0.001, max_records=2)
    try:
        first = plan(source, source.initialOffset())  # p0 delivers and is capped; p1 is slow
        assert first.partitions == {f"{topic}:0": 1, p1: 2} and first.barrier == 0
        second = plan(source, first.to_json())  # the 1 ms timeout passed: snapshot where p1's batch ends
        assert second.barrier == 1 and second.partitions == {f"{topic}:0": 1, p1: 4}
        offset = second
        while read_alignment(tmp_path / "control", 1) is None:
            offset = plan(source, offset.to_json())
        record = read_alignment(tmp_path / "control", 1)
        assert record is not None and record["mode"] == "aligned-timed-out"
        assert record["channel_state"] == [{"partition": p1, "start": 4, "end": 6, "records": 2, "back_edge": False}]
        assert record["alignment_ms"] > 0  # first barrier to the switch
    finally:
        source.stop()


def test_alignment_timeout_counts_from_when_a_barrier_is_first_seen_ahead_of_the_batch(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """Both partitions hold a backlog of 40 rows before barrier 1 and a batch reads 2 rows of
    each: in-band, the barrier would be reached after 20 batches. With a 0.2 s alignment
    timeout the planner sees the barriers ahead of the batch, and the first plan after the
    timeout passed snapshots checkpoint 1 where the batch ends, the backlog before each
    barrier becoming channel state (Flink: the timeout is compared with the checkpoint's start
    delay, not with the time since the barrier was processed)."""
    backlog = 40
    topic = channel(kafka_endpoint, {0: [*range(backlog), ("B", 1)], 1: [*range(backlog), ("B", 1)]})
    p0, p1 = f"{topic}:0", f"{topic}:1"
    timeout = 0.2
    source = reader(kafka_endpoint, topic, tmp_path, timeout=timeout, max_records=2)
    try:
        first = plan(source, source.initialOffset())  # the barriers are seen, not reached
        assert first.barrier == 0 and first.partitions == {p0: 2, p1: 2}
        time.sleep(timeout)  # the timeout elapsing is the behaviour under test, not a readiness wait
        second = plan(source, first.to_json())
        assert second.barrier == 1 and second.partitions == {p0: 4, p1: 4}
        record = read_alignment(tmp_path / "control", 1)
        assert record is not None and record["mode"] == "aligned-timed-out"
        assert record["channel_state"] == [
            {"partition": p, "start": 4, "end": backlog, "records": backlog - 4, "back_edge": False} for p in (p0, p1)]
        assert record["alignment_ms"] >= timeout * 1000  # from when the first barrier was seen
        third = plan(source, second.to_json())  # the delivered barriers no longer stop the batches
        assert third.barrier == 1 and third.partitions == {p0: 6, p1: 6}
    finally:
        source.stop()


@pytest.mark.parametrize(("age", "timeout"), [(5.0, 1.0), (0.0, 3600.0)])
def test_alignment_timeout_counts_from_the_trigger_time_the_barriers_carry(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path, age: float, timeout: float) -> None:
    """Barrier records carry their checkpoint's trigger time (``bf-triggered-ms``), and the
    timeout counts from it, as Flink's counts from the barrier's timestamp: barriers of a
    checkpoint triggered 5 s ago, seen for the first time with a 1 s timeout, switch it to
    unaligned in the very plan that sees them; barriers triggered just now, with a timeout no
    test run outlasts (an hour, so the machine's speed cannot decide it), do not. The snapshot
    batch's offsets carry the trigger time on (for the barriers this stage writes)."""
    backlog = 40
    triggered_ms = round((time.time() - age) * 1000)
    topic = channel(kafka_endpoint, {p: [*range(backlog), ("B", 1, triggered_ms)] for p in (0, 1)})
    p0, p1 = f"{topic}:0", f"{topic}:1"
    source = reader(kafka_endpoint, topic, tmp_path, timeout=timeout, max_records=2)
    try:
        first = plan(source, source.initialOffset())
        assert first.partitions == {p0: 2, p1: 2}
        if age == 0.0:
            assert first.barrier == 0 and first.barrier_triggered_ms is None  # the timeout not passed: aligned
            return
        assert first.barrier == 1 and first.barrier_triggered_ms == triggered_ms
        record = read_alignment(tmp_path / "control", 1)
        assert record is not None and record["mode"] == "aligned-timed-out"
        assert record["channel_state"] == [
            {"partition": p, "start": 2, "end": backlog, "records": backlog - 2, "back_edge": False} for p in (p0, p1)]
        second = plan(source, first.to_json())
        assert second.barrier == 1 and second.barrier_triggered_ms == triggered_ms  # sticky, like the barrier
    finally:
        source.stop()


def test_restored_attempt_skips_what_the_older_attempt_wrote_after_the_barrier(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """Attempt 0 wrote rows 0-1, barrier 1, rows 2-3 (stale after a restore to checkpoint 1);
    attempt 1 then wrote rows 2-3 again and barrier 2. Attempt 1's source reads 0, 1, 2, 3 once
    and aligns on barrier 2, ignoring attempt 0's barrier."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)

    def row(i: int, attempt: int) -> tuple[int, None, bytes, list[tuple[str, bytes]]]:
        return 0, None, json.dumps({"n": i}).encode(), data_headers(attempt)

    def bar(n: int, attempt: int) -> tuple[int, None, bytes, list[tuple[str, bytes]]]:
        marker = BarrierMarker(n, attempt, "up")
        return 0, None, marker.value(), marker.headers()

    produce(kafka_endpoint, topic, [row(0, 0), row(1, 0), bar(1, 0), row(2, 0), row(3, 0),
                                    row(2, 1), row(3, 1), bar(2, 1)])
    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=kafka_endpoint.bootstrap_servers,
                           topics=[topic], format="json", json_fields={"n": "long"}, poll_timeout=5)
    source = ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                  "alignment": json.dumps({"attempt": 1, "last_completed": 1, "cutoffs": [
                                      {"attempt": 1, "offsets": {f"{topic}:0": 2}}]})})
    try:
        end = plan(source, {"partitions": {f"{topic}:0": 0}, "barrier": 1})
        assert end.partitions == {f"{topic}:0": 8} and end.barrier == 2  # barrier 1 of attempt 0 ignored
        rows = [r["n"] for batch in source.read(InputPartition((topic, 0, 0, 8))) for r in batch.to_pylist()]
        assert rows == [0, 1, 2, 3]
    finally:
        source.stop()


def test_stale_records_of_dead_attempts_do_not_count_against_the_batch_cap(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """After restores, what dead attempts wrote after the restored barrier is skipped without
    counting against max_records_per_batch (after many restores it can be far more than a
    checkpoint interval's worth of capped batches): attempts 0 and 1 each left 6 stale rows;
    attempt 2's first batch, capped at 3 records, reaches 3 of its own rows."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, topic, 1)

    def row(i: int, attempt: int) -> tuple[int, None, bytes, list[tuple[str, bytes]]]:
        return 0, None, json.dumps({"n": i}).encode(), data_headers(attempt)

    barrier = BarrierMarker(1, 0, "up")
    produce(kafka_endpoint, topic, [row(0, 0), (0, None, barrier.value(), barrier.headers())]
            + [row(i, 0) for i in range(1, 7)] + [row(i, 1) for i in range(1, 7)] + [row(i, 2) for i in range(1, 7)])
    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=kafka_endpoint.bootstrap_servers,
                           topics=[topic], format="json", json_fields={"n": "long"}, poll_timeout=5,
                           max_records_per_batch=3)
    cutoffs = [{"attempt": a, "offsets": {f"{topic}:0": 1}} for a in (1, 2)]
    source = ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                  "alignment": json.dumps({"attempt": 2, "last_completed": 1, "cutoffs": cutoffs})})
    try:
        end = plan(source, {"partitions": {f"{topic}:0": 2}, "barrier": 1})
        assert end.partitions == {f"{topic}:0": 17}  # 12 stale rows skipped, then 3 of attempt 2's
        rows = [r["n"] for batch in source.read(InputPartition((topic, 0, 2, 17))) for r in batch.to_pylist()]
        assert rows == [1, 2, 3]
        assert plan(source, {"partitions": {f"{topic}:0": 17}, "barrier": 1}).partitions == {f"{topic}:0": 20}
    finally:
        source.stop()


def test_slow_partition_aligned_waits_for_the_backlog_unaligned_does_not(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """p1 has a backlog of 120 records before barrier 1 and is read 10 records per batch (the
    slow partition); p0 delivers its barrier at once. Counted in planning rounds (one round =
    one micro-batch) until the stage's alignment of checkpoint 1 is complete."""
    topic = channel(kafka_endpoint, {0: [0, ("B", 1), 1], 1: [*range(120), ("B", 1), 120]})
    rounds: dict[str, int] = {}
    for mode, timeout in (("aligned", 0.0), ("unaligned", 0.0), ("aligned", 0.05)):
        label = f"{mode}{f' timeout {timeout:g}s' if timeout else ''}"
        control = tmp_path / label.replace(" ", "-")
        source = reader(kafka_endpoint, topic, control, mode=mode, timeout=timeout, max_records=10)
        try:
            offset, count = plan(source, source.initialOffset()), 1
            while read_alignment(control / "control", 1) is None and count < 50:
                if timeout:
                    time.sleep(timeout / 5)  # simulated: a micro-batch takes time between two rounds
                offset, count = plan(source, offset.to_json()), count + 1
            rounds[label] = count
            record = read_alignment(control / "control", 1)
            assert record is not None
            if mode == "unaligned" or timeout:
                assert record["channel_state_records"] > 0
        finally:
            source.stop()
    print(f"\nrounds until checkpoint 1 aligned with a slow partition: {rounds}")
    assert rounds["unaligned"] == 1 and rounds["aligned"] >= 12
    assert rounds["aligned timeout 0.05s"] < rounds["aligned"]


def test_partition_rate_factors_slow_one_partition_down(kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """``rate_factors`` (from ``partition_rate_factors``) scale one partition's cap: with 20 rows
    each and a cap of 10, partition 1 at 0.2 advances 2 per batch while partition 0 takes 10."""
    topic = channel(kafka_endpoint, {0: list(range(20)), 1: list(range(20))})
    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=kafka_endpoint.bootstrap_servers,
                           topics=[topic], format="json", json_fields={"n": "long"}, max_records_per_batch=10,
                           poll_timeout=5)
    source = ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                  "alignment": json.dumps({"rate_factors": {f"{topic}:1": 0.2}})})
    try:
        first = plan(source, source.initialOffset())
        assert first.partitions == {f"{topic}:0": 10, f"{topic}:1": 2}
        assert plan(source, first.to_json()).partitions == {f"{topic}:0": 20, f"{topic}:1": 4}
    finally:
        source.stop()


def test_executor_reads_data_records_as_columns_and_names_a_malformed_barrier(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """The executor reads a channel range as columns (the Kafka source's json path), leaving
    out barrier records by their headers: rows, offsets and event times are those of the data
    records only, also for a range holding nothing but barriers. A record marked as a barrier
    whose headers do not decode stops the read with an error naming the partition and offset
    (as the record-by-record path did), never passing it on as data."""
    topic = channel(kafka_endpoint, {0: [0, 1, ("B", 1), 2, ("B", 2), ("B", 3)], 1: [10]})
    source = reader(kafka_endpoint, topic, tmp_path)
    try:
        batches = list(source.read(InputPartition((topic, 0, 0, 6))))
        rows = [(r["n"], r["offset"]) for batch in batches for r in batch.to_pylist()]
        assert rows == [(0, 0), (1, 1), (2, 3)]
        assert [r for b in source.read(InputPartition((topic, 0, 4, 6))) for r in b.to_pylist()] == []
    finally:
        source.stop()
    broken = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_endpoint, broken, 1)
    produce(kafka_endpoint, broken, [(0, None, b'{"n": 1}', data_headers(0)),
                                     (0, None, b"{}", [("bf-barrier", b"not-a-number")])])
    source = reader(kafka_endpoint, broken, tmp_path)
    try:
        with pytest.raises(BarrierRecordError, match=rf"{broken}:0 offset 1 is marked as a barrier"):
            list(source.read(InputPartition((broken, 0, 0, 2))))
    finally:
        source.stop()


def test_channel_state_is_counted_from_the_barrier_scan_as_reading_would_count_it(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """Once the barrier scan covered a range, its data records are counted without reading it
    (the range's length less the barrier records found): for every sub-range the count equals
    the count of a read record by record; a range the scan did not cover is read."""
    topic = channel(kafka_endpoint, {0: [0, ("B", 1), 1, 2, ("B", 2), 3, 4], 1: [*range(9), ("B", 1), 9]})
    source = reader(kafka_endpoint, topic, tmp_path, mode="unaligned", max_records=3)
    try:
        plan(source, source.initialOffset())  # unaligned: the scan looks ahead to each log's end
        for partition, length in ((f"{topic}:0", 7), (f"{topic}:1", 11)):
            assert source._scanned_to[partition] == length and source._found_from[partition] == 0
            number = int(partition.rsplit(":", 1)[1])
            data = [r.offset for r in read_range(source.spec, topic, number, 0, length)
                    if decode_barrier(r.headers) is None]
            for start in range(length):
                for end in range(start + 1, length + 1):
                    expected = sum(1 for o in data if start <= o < end)
                    assert source._count_data_records(partition, start, end) == expected, (partition, start, end)
        source._scanned_to[f"{topic}:0"] = 3  # as if the scan had stopped at offset 3: read instead
        assert source._count_data_records(f"{topic}:0", 0, 7) == 5
    finally:
        source.stop()


def _row_batch(first: int, rows: int) -> tuple[None, bytes, list[tuple[str, bytes]]]:
    """A row-batch record of ``rows`` rows ``n = first, first + 1, ...`` (as the channel writer's tasks write)."""
    batch = pa.RecordBatch.from_pydict({"n": list(range(first, first + rows))})
    return None, encode(batch), [*data_headers(0), rows_header(rows)]


def batched_channel(endpoint: KafkaEndpoint, layout: dict[int, list[Any]]) -> str:
    """As :func:`channel`, but an int is a row-batch record of that many rows."""
    topic = f"ch-{uuid.uuid4().hex[:8]}"
    create_topic(endpoint, topic, 2)
    records, first = [], 0
    for partition, items in layout.items():
        for item in items:
            if isinstance(item, tuple):
                records.append((partition, *_barrier(item[1])))
            else:
                records.append((partition, *_row_batch(first, item)))
                first += item
    produce(endpoint, topic, records)
    return topic


def test_row_batches_are_planned_and_counted_in_rows(kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """A batch takes the records holding at most ``max_records_per_batch`` rows (at least one
    record: a record above the cap is read alone), channel state is counted in rows for every
    sub-range as a read would count them, and the executors give each row once."""
    topic = batched_channel(kafka_endpoint, {0: [5, 2, ("B", 1), 7, 12, 3], 1: [1, 1, 1]})
    source = reader(kafka_endpoint, topic, tmp_path, mode="unaligned", max_records=8)
    p0, p1 = f"{topic}:0", f"{topic}:1"
    try:
        start = source.initialOffset()
        first = plan(source, start)
        # Partition 0: 5 + 2 rows, then barrier 1 (unaligned: the batch ends just after it).
        assert first.partitions == {p0: 3, p1: 3}
        rows = sorted(r["n"] for part in source.partitions(start, first.to_json())
                      for b in source.read(part) for r in b.to_pylist())
        assert rows == [*range(7), 29, 30, 31]
        length = 6  # unaligned: the first plan scanned both logs to their ends
        data = {r.offset: rows_in(r.headers) for r in read_range(source.spec, topic, 0, 0, length)
                if decode_barrier(r.headers) is None}
        assert source._scanned_to[p0] == length and source._found_from[p0] == 0
        for begin in range(length):
            for end in range(begin + 1, length + 1):
                expected = sum(n for o, n in data.items() if begin <= o < end)
                assert source._count_data_records(p0, begin, end) == expected, (begin, end)
        second = plan(source, first.to_json())
        assert second.partitions[p0] == 4  # 7 rows; the 12-row record would pass the cap of 8
        third = plan(source, second.to_json())
        assert third.partitions[p0] == 5  # the 12-row record alone (a batch always moves on)
    finally:
        source.stop()


def test_a_slow_partition_reads_its_rate_in_rows_however_large_its_records(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """With records of 10 rows and a cap of 10, a partition at rate factor 0.2 may read 2 rows
    per batch: it reads one record every 5 batches (credit builds up), not one per batch."""
    topic = batched_channel(kafka_endpoint, {0: [10] * 10, 1: [10] * 10})
    spec = KafkaSourceSpec(name="in", type="kafka", bootstrap_servers=kafka_endpoint.bootstrap_servers,
                           topics=[topic], format="json", json_fields={"n": "long"}, max_records_per_batch=10,
                           poll_timeout=5)
    source = ChannelStreamReader({"spec": spec.model_dump_json(), "control_dir": str(tmp_path / "control"),
                                  "alignment": json.dumps({"rate_factors": {f"{topic}:1": 0.2}})})
    ends = []
    try:
        offset = source.initialOffset()
        for _ in range(10):
            planned = plan(source, offset)
            ends.append((planned.partitions[f"{topic}:0"], planned.partitions.get(f"{topic}:1", 0)))
            offset = planned.to_json()
    finally:
        source.stop()
    assert [fast for fast, _ in ends] == list(range(1, 11))
    assert [slow for _, slow in ends] == [0, 0, 0, 0, 1, 1, 1, 1, 1, 2]
