"""Flow control in a stage fed by a channel: per-partition watermarks, idleness and watermark
alignment on a skewed channel, and adaptive batch sizing under a backlog.

Watermark alignment (the first test). Channel ``ab`` (2 partitions) already holds its data when
the pipeline starts: 1,200 generator records 100 ms apart in event time (120 s), cut as stage
``gen`` cuts them (round-robin, a row-batch record of 50 rows per partition for every 100
records), so each partition holds 12 records of 10 s of event time each, in order. Stage
``gen`` then reads the same generator but writes no rows: it only drives the checkpoints, and
its barrier records follow all the data on both partitions. Stage ``win`` reads ``ab`` 200 rows
per partition and batch, partition 1 at a tenth of that (``partition_rate_factors``: 20 rows of
credit per batch, a 50-row record every second or third planning call), and counts records
per key in 10-second event-time windows (watermark delay 5 s), committed to Parquet through the
two-phase-commit sink. Checkpoints are unaligned, so barrier alignment never holds the fast
partition back: only watermark alignment can.

So the skew is a property of the input and of the reader's planned pace, not of how fast the
machine runs the stages: every record is there from the first batch, and what each batch of
``win`` reads follows from the offsets alone. Without alignment partition 0 reads its whole
120 s in the first three batches while partition 1 has read at most one record, and Spark's
one watermark drops partition 1's later records as late, in every run. The aligned run is the
same run with ``max_drift`` (2 s) below the delay: the reader holds partition 0 to partition 1's
pace, so no row is late, the committed window counts equal the counts computed directly from the
generator, and after every planned batch (the watermark history, not a sample at checkpoints)
the two partitions' newest event times are within ``max_drift``. Session 23 fixed three planner
bugs this run turned into late rows: the throttled partition counted as idle while it waited
for credit (the 1 ms ``idle_timeout`` makes that show at the first wait, whatever the machine's
speed), a row-batch record (10 s of event time) was cut by its first row's event time, and the
cap's search stepped over stretches of barrier records (not exercised here: the barrier records
all follow the data). Either way, every stage's manifests carry each input partition's event
time, and the skew report has a row per stage and partition.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from barrierflow.barriers.records import data_headers
from barrierflow.flow_control.watermark_history import WatermarkHistory
from barrierflow.kafka_io.row_batches import encode, rows_header
from barrierflow.ops.skew import skew
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.pipeline_runner import RunResult
from barrierflow.sinks.parquet import read_committed
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import parse_staged_spec

from tests.support.kafka_broker import KafkaEndpoint, channel_rows, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow(70)]

RECORDS = 1200  # one generator partition, 100 ms apart: 120 s of event time, on both channel partitions
DELAY = 5.0
WINDOW = timedelta(seconds=10)
MAX_DRIFT = 2.0
GEN_BATCH = 100  # generator records per row-batch record pair: 50 rows (10 s of event time) per partition


def spec_data(tmp_path: Path, endpoint: KafkaEndpoint, name: str, event_time: dict[str, Any]) -> dict[str, Any]:
    root = tmp_path / name
    return {
        "name": name, "work_dir": str(root / "work"),
        "channels": [{"name": "ab", "topic": f"ab-{uuid.uuid4().hex[:8]}", "partitions": 2,
                      "bootstrap": endpoint.bootstrap_servers}],
        "stages": [
            {"name": "gen",
             "sources": [{"name": "events", "type": "generator", "partitions": 1, "rows_per_second": 0, "keys": 5,
                          "max_records_per_batch": 100, "event_time_step_ms": 100,
                          "records_per_partition": RECORDS}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"key": "key", "value": "value", "event_time": "event_time"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "win",
             "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": 200,
                          "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}}],
             "transformation": {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                                "output_mode": "append", "options": {"window": "10 seconds"}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{root / 'out'}"}]},
        ],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{root / 'chk'}", "interval": "1s", "timeout": "120s",
                       "mode": "unaligned"},
        "event_time": {"column": "event_time", "watermark_delay": f"{DELAY:g}s", **event_time},
    }


def direct_counts(data: dict[str, Any]) -> Counter[tuple[datetime, int]]:
    """(window start, key) -> records, straight from the generator's record function."""
    spec = parse_staged_spec(data)
    model = GeneratorModel(spec.stage("gen").sources[0])  # type: ignore[arg-type]
    counts: Counter[tuple[datetime, int]] = Counter()
    for _p, _o, key, _v, event_time in model.rows(0, 0, RECORDS):
        start = datetime.fromtimestamp(event_time.timestamp() // 10 * 10, UTC)
        counts[(start, key)] += 1
    return counts


def committed_counts(data: dict[str, Any]) -> Counter[tuple[datetime, int]]:
    table = read_committed(data["stages"][1]["sinks"][0]["path"])
    out: Counter[tuple[datetime, int]] = Counter()
    for row in table.to_pylist() if table is not None else []:
        start = row["window_start"] if row["window_start"].tzinfo else row["window_start"].replace(tzinfo=UTC)
        assert (start, row["key"]) not in out, "a window was committed twice"
        out[(start, row["key"])] = row["count"]
    return out


def surely_closed(counts: Counter[tuple[datetime, int]]) -> Counter[tuple[datetime, int]]:
    """Windows that end well before the final watermark (newest event time minus the delay,
    minus a margin for the last batches): Spark must have emitted each of them by the end."""
    newest = max(start for start, _ in counts) + WINDOW
    watermark = newest - timedelta(seconds=DELAY + 20)
    return Counter({k: c for k, c in counts.items() if k[0] + WINDOW <= watermark})


def run(spark: Any, tmp_path: Path, data: dict[str, Any]) -> RunResult:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    result = StagedPipelineJob(parse_staged_spec(data), spec_path=str(path), spark=spark).run(
        until_exhausted=True, duration=600)
    assert result.elapsed_seconds < 600, "the run did not reach the end of its bounded source"
    return result


def late_rows(result: RunResult) -> int:
    """Rows Spark dropped as late in stage ``win`` (the newest manifest's running total)."""
    last = result.stage_manifests["win"][-1].event_time
    assert last is not None, "stage win's manifests carry no event_time section"
    return last.rows_dropped_total


def fill_channel(endpoint: KafkaEndpoint, data: dict[str, Any]) -> dict[int, list[datetime]]:
    """Write channel ``ab``'s data records before the run, as stage ``gen`` writes its batches of
    :data:`GEN_BATCH` generator records (round-robin: even records to partition 0, odd ones to
    partition 1; one row-batch record per partition and batch, with the headers a stage of
    attempt 0 writes). Returns, per partition, the newest event time of the record at each
    offset (offsets 0.. hold the data; every barrier record comes after it)."""
    spec = parse_staged_spec(data)
    model = GeneratorModel(spec.stage("gen").sources[0])  # type: ignore[arg-type]
    rows = model.rows(0, 0, RECORDS)
    topic = data["channels"][0]["topic"]
    create_topic(endpoint, topic, 2)
    records: list[tuple[int, None, bytes, list[tuple[str, bytes]]]] = []
    newest: dict[int, list[datetime]] = {0: [], 1: []}
    for first in range(0, RECORDS, GEN_BATCH):
        for partition in (0, 1):
            part = rows[first + partition:first + GEN_BATCH:2]
            batch = pa.RecordBatch.from_pydict({
                "key": pa.array([r[2] for r in part], pa.int64()),
                "value": pa.array([r[3] for r in part], pa.int64()),
                "event_time": pa.array([r[4] for r in part], pa.timestamp("us", tz="UTC"))})
            records.append((partition, None, encode(batch),
                            [*data_headers(0), rows_header(batch.num_rows)]))
            newest[partition].append(max(r[4] for r in part))
    produce(endpoint, topic, records)
    return newest


def batch_leads(data: dict[str, Any], newest: dict[int, list[datetime]]) -> list[float]:
    """After every batch stage ``win`` planned (its watermark history, in planning order) in
    which both input partitions had read something: how far, in seconds, one partition's
    newest event time read was ahead of the other's (from the offsets the batch ended at and
    the records :func:`fill_channel` wrote there). Every batch, not a sample at checkpoints."""
    topic = data["channels"][0]["topic"]
    history = WatermarkHistory(Path(data["work_dir"]) / "stages" / "win" / "control").records()
    assert history, "stage win planned no batch (or wrote no watermark history)"
    leads = []
    for record in history:
        ends = [min(record.end.get(f"{topic}:{p}", 0), len(newest[p])) for p in (0, 1)]
        if all(ends):
            times = [newest[p][end - 1] for p, end in enumerate(ends)]
            leads.append((max(times) - min(times)).total_seconds())
    return leads


def skewed_channel_spec(tmp_path: Path, endpoint: KafkaEndpoint, name: str,
                        event_time: dict[str, Any]) -> tuple[dict[str, Any], dict[int, list[datetime]]]:
    """The alignment test's pipeline (see the module docstring) and its channel, filled: ``gen``
    writes no rows (its barrier records follow the data), ``win`` reads partition 1 at 0.1x."""
    data = spec_data(tmp_path, endpoint, name, {"idle_timeout": "1ms", **event_time})
    gen, win = data["stages"]
    gen["sources"][0]["max_records_per_batch"] = RECORDS  # its reading paces nothing now
    gen["transformation"]["options"]["where"] = "false"
    win["sources"][0]["partition_rate_factors"] = [1, 0.1]
    return data, fill_channel(endpoint, data)


def test_watermark_alignment_in_a_stage_reading_a_skewed_channel_loses_no_late_rows(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    # -- without alignment: the fast channel partition drives the watermark -----------------
    # Partition 0 reads 4 records (40 s) per batch and is at its end after the third batch,
    # when partition 1 (20 rows of credit per batch) reads its first record: the watermark is
    # then 75 s and later 115 s, past the windows of partition 1's next records. Nothing here
    # depends on the machine's speed, so the rows are lost in every run.
    plain, newest = skewed_channel_spec(tmp_path, kafka_endpoint, "plain", {})
    result = run(spark, tmp_path, plain)
    expected = surely_closed(direct_counts(plain))
    committed = committed_counts(plain)
    missing = sum(c - committed.get(k, 0) for k, c in expected.items())
    leads = batch_leads(plain, newest)
    print(f"\nstage without alignment: a partition ahead by up to {max(leads, default=0):.1f}s after a batch, "
          f"late rows dropped {late_rows(result)}, records missing from {len(expected)} closed windows: {missing}")
    assert late_rows(result) > 0, "without alignment the slow partition's records should have been late"
    assert missing > 0, "without alignment the committed windows should lack the slow partition's late records"
    assert max(leads, default=0) > DELAY + WINDOW.total_seconds()

    # -- with alignment: the stage's reader holds the fast partition back -------------------
    aligned, newest = skewed_channel_spec(tmp_path, kafka_endpoint, "aligned", {
        "alignment": {"group": "g", "max_drift": f"{MAX_DRIFT:g}s", "update_interval": "0s"}})
    result = run(spark, tmp_path, aligned)
    expected = surely_closed(direct_counts(aligned))
    committed = committed_counts(aligned)
    leads = batch_leads(aligned, newest)
    print(f"stage with alignment (max_drift {MAX_DRIFT:g}s < delay {DELAY:g}s): a partition ahead by up to "
          f"{max(leads, default=0):.1f}s after any of {len(leads)} batches, late rows dropped {late_rows(result)}, "
          f"{len(expected)} closed windows equal to the direct counts: "
          f"{all(committed.get(k) == c for k, c in expected.items())}")
    assert late_rows(result) == 0
    assert {k: committed.get(k) for k in expected} == dict(expected)
    assert set(committed) <= set(direct_counts(aligned))
    # That it aligned: after every batch both partitions had read up to within max_drift of
    # each other (without alignment: 110 s apart after the third batch, above).
    assert leads and max(leads) <= MAX_DRIFT, f"a channel partition got {max(leads):.1f}s ahead: {leads}"

    # -- event times in every stage's manifests, and a skew report row per stage and partition
    topic = aligned["channels"][0]["topic"]
    for stage, partitions in {"gen": {"0"}, "win": {f"{topic}:0", f"{topic}:1"}}.items():
        manifest = result.stage_manifests[stage][-1]
        assert len(manifest.max_event_time) == 1, manifest.max_event_time  # one source per stage
        times = next(iter(manifest.max_event_time.values()))
        assert set(times) == partitions and all(t is not None for t in times.values()), (stage, times)
        assert manifest.event_time is not None and manifest.event_time.alignment_group == "g"
    report = skew(tmp_path / "aligned.yaml")
    assert set(report.stages) == {"gen", "win"}
    for stage, partitions in {"gen": {"0"}, "win": {f"{topic}:0", f"{topic}:1"}}.items():
        rows = report.stages[stage].checkpoints
        assert rows, f"no skew rows for stage {stage}"
        assert {p.name.split("/", 1)[1] for p in rows[-1].partitions} == partitions  # "<source>/<partition>"
        assert all(p.max_event_time is not None for p in rows[-1].partitions)


def test_adaptive_batch_sizing_caps_a_stage_reading_a_backlog(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """``trigger.target_batch_duration`` in a stage fed by a channel: the stage's reader sizes
    its batches (the first at the sizer's minimum, 1,000 rows per partition, then by measured
    throughput) instead of taking the whole backlog (``max_records_per_batch`` 100,000); every
    planned batch stays within the cap (in rows) the planner recorded, and every record
    arrives. ``gen`` writes row-batch records of 200 rows, so a batch of 1,000 rows is 5 records."""
    data = spec_data(tmp_path, kafka_endpoint, "sized", {})
    gen, win = data["stages"]
    gen["sources"][0].update({"partitions": 2, "max_records_per_batch": 400, "records_per_partition": 4000})
    win["sources"][0].update({"max_records_per_batch": 100_000, "partition_rate_factors": []})
    win["transformation"] = {"function": "barrierflow.transforms.projection:project",
                             "options": {"columns": {"key": "key", "value": "value"}}}
    data["trigger"]["target_batch_duration"] = "500ms"
    result = run(spark, tmp_path, data)
    assert result.completed, "no global checkpoint completed"
    from barrierflow.flow_control.watermark_history import WatermarkHistory

    history = [r for r in WatermarkHistory(tmp_path / "sized" / "work" / "stages" / "win" / "control").records()
               if r.end != r.start]
    sizes = [{p: channel_rows(kafka_endpoint, p, r.start.get(p, 0), r.end[p]) for p in r.end} for r in history]
    print(f"\nstage win's batches under a backlog of 8,000 rows (rows per partition, cap): "
          f"{[(max(s.values()), r.cap) for s, r in zip(sizes, history, strict=True)]}")
    assert history and all(r.cap is not None for r in history), "stage win planned without the batch sizer"
    assert history[0].cap == 1000
    assert all(max(s.values()) <= r.cap for s, r in zip(sizes, history, strict=True) if r.cap is not None)
    assert len(history) > 2 and any(max(s.values()) > 0 for s in sizes[1:])
    table = read_committed(win["sinks"][0]["path"])
    assert table is not None and table.num_rows == 8000
