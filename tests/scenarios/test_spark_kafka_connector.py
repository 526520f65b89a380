"""Spark's own Kafka connector (``reader: spark``) with barrierflow's checkpoints, on the suite's
Apache Kafka broker.

1. A bounded run over two partitions into Parquet (2PC): the committed rows are exactly the
   produced records; every checkpoint's cut is the connector's offsets of its barrier batch in
   Spark's offset log, the last one the topic's end offsets; ``validate --deep`` and ``verify``
   (structural checks, the source-range check against the broker, and ``--deep``: restore and
   read the state) accept it.
2. Kills: a driver SIGKILLed at the two-phase-commit crash points (the sinks pre-committed
   without a manifest; a sink commit half done), each restarted by restoring the latest
   checkpoint (or the plain restart path); a windowed aggregation (state in every checkpoint)
   ends with exactly the failure-free rows: 0 missing, 0 extra, 0 duplicated. (Every stage
   point, through barrierflow's reader: tests/scenarios/test_exactly_once_kafka.py; the
   protocol does not depend on the reader, only where the cut is read from.)
3. The connector as the external source of the first stage of two (channel between them on the
   same broker): every record reaches the second stage's Parquet output once.
4. ``barrierflow chaos`` accepts such a pipeline and passes it under a SIGKILL at a random
   moment (the windowed pipeline of 2, so the kill lands on state and 2PC alike).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.errors import IncompatibleStateError
from barrierflow.sinks.parquet import read_committed
from barrierflow.spark import offset_log

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import (
    CRASH_AT,
    FAST_JVM,
    assert_sub_multiset,
    crashed_run,
    finish,
    lost_and_duplicated,
    recover,
)
from tests.support.kafka_broker import KafkaEndpoint, create_topic

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900)]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Event time between records of a partition.
STEP_MS = 10
KEYS = 5


def _records(partition: int, count: int) -> list[dict[str, Any]]:
    return [{"key": i % KEYS, "value": partition * 100_000 + i,
             "event_time": (T0 + timedelta(milliseconds=i * STEP_MS)).isoformat()} for i in range(count)]


def _produce(endpoint: KafkaEndpoint, topic: str, by_partition: dict[int, list[dict[str, Any]]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=endpoint.bootstrap_servers, acks="all")
    try:
        futures = [producer.send(topic, value=json.dumps(r).encode(), partition=p)
                   for p, records in by_partition.items() for r in records]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close(timeout=10)


def _spec(tmp_path: Path, endpoint: KafkaEndpoint, topic: str, *, windows: bool, per_batch: int) -> Path:
    source = {"name": "events", "type": "kafka", "reader": "spark", "bootstrap_servers": endpoint.bootstrap_servers,
              "topics": [topic], "max_records_per_batch": per_batch, "format": "json",
              "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}}
    if windows:
        transformation = {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                          "output_mode": "append", "options": {"window": "1 second"}}
    else:
        transformation = {"function": "barrierflow.transforms.projection:project",
                          "options": {"columns": {"partition": "partition", "offset": "offset", "key": "key",
                                                  "value": "value", "event_time": "event_time"}}}
    data = {
        "version": 1, "name": f"sk{uuid.uuid4().hex[:8]}", "work_dir": str(tmp_path / "work"),
        "sources": [source], "transformation": transformation,
        **({"event_time": {"column": "event_time", "watermark_delay": "200ms"}} if windows else {}),
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "300ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _committed(tmp_path: Path) -> list[dict[str, Any]]:
    table = read_committed(f"file://{tmp_path / 'out'}")
    return table.to_pylist() if table is not None else []


def _checks(document: Any) -> list[dict[str, Any]]:
    """Every check (a dict with a name and a status) anywhere in ``verify --json``'s document."""
    if isinstance(document, dict):
        found = [document] if {"name", "status"} <= set(document) else []
        return found + [c for value in document.values() for c in _checks(value)]
    if isinstance(document, list):
        return [c for value in document for c in _checks(value)]
    return []


@pytest.mark.slow(45)
def test_a_bounded_run_commits_exactly_the_topic_and_its_checkpoints_verify(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        figures: dict[str, object]) -> None:
    topic = f"sk-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 2)
    produced = {0: _records(0, 900), 1: _records(1, 700)}
    _produce(kafka_endpoint, topic, produced)
    spec_path = _spec(tmp_path, kafka_endpoint, topic, windows=False, per_batch=200)
    assert main(["validate", str(spec_path), "--deep"]) == 0

    spec = finish(spark, spec_path)
    rows = _committed(tmp_path)
    got = Counter((r["partition"], r["offset"], r["key"], r["value"], r["event_time"].replace(tzinfo=UTC))
                  for r in rows)
    want = Counter((p, i, r["key"], r["value"], datetime.fromisoformat(r["event_time"]))
                   for p, records in produced.items() for i, r in enumerate(records))
    assert got == want and len(rows) == 1600

    from barrierflow.checkpointing.store import CheckpointStore

    manifests = [CheckpointStore.for_spec(spec).get(i) for i in CheckpointStore.for_spec(spec).checkpoint_ids()]
    assert len(manifests) >= 2
    spark_dir = Path(tmp_path / "work" / "spark-checkpoint")
    for manifest in manifests:  # each cut is the connector's offsets of its barrier batch
        lines = offset_log.read_lines(offset_log.path_of(spark_dir, manifest.spark_batch_id))[1:]
        connector = next(json.loads(line) for line in lines if '"connector"' not in line)
        assert manifest.barrier_offsets["events"] == {f"{topic}:{p}": o for p, o in connector[topic].items()}
    assert manifests[-1].barrier_offsets["events"] == {f"{topic}:0": 900, f"{topic}:1": 700}
    figures.update({"checkpoints": len(manifests), "batches": manifests[-1].spark_batch_id + 1})

    capsys.readouterr()
    assert main(["verify", str(spec_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["failed"] == [] and summary["verified"] == len(manifests)
    passed = {c["name"] for c in _checks(summary) if c["status"] == "passed"}
    assert {"offsets-log", "source-retention"} <= passed, passed
    assert main(["verify", str(spec_path), "--latest", "1", "--deep"]) == 0

    # The same state under barrierflow's own reader is refused before anything runs (Spark
    # planned its batches with two sources, the connector and the barrier-only source; the
    # Python reader is one), naming the change; the output stays as it was.
    data = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    data["sources"][0]["reader"] = "python"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(IncompatibleStateError, match=r"streaming sources: \['kafka', '\w+'\] -> \['\w+'\]"):
        finish(spark, spec_path)
    assert len(_committed(tmp_path)) == 1600


@pytest.mark.slow(80)
def test_sigkilled_drivers_restart_to_exactly_the_failure_free_rows(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, figures: dict[str, object]) -> None:
    topic = f"sk-kill-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 1)
    records = _records(0, 3000)
    # A last record 10 s later closes every window of the data (its own window stays open).
    flush = {"key": 0, "value": 0, "event_time": (T0 + timedelta(seconds=40)).isoformat()}
    _produce(kafka_endpoint, topic, {0: [*records, flush]})
    reference_counts: Counter[tuple[datetime, int]] = Counter()
    sums: Counter[tuple[datetime, int]] = Counter()
    for r in records:
        start = datetime.fromisoformat(r["event_time"]).replace(microsecond=0)
        reference_counts[(start, r["key"])] += 1
        sums[(start, r["key"])] += r["value"]
    reference = sorted((s, s + timedelta(seconds=1), k, n, sums[(s, k)]) for (s, k), n in reference_counts.items())
    spec_path = _spec(tmp_path, kafka_endpoint, topic, windows=True, per_batch=300)

    def committed() -> list[tuple[Any, ...]]:
        def utc(t: datetime) -> datetime:
            return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)

        return sorted((utc(r["window_start"]), utc(r["window_end"]), int(r["key"]), int(r["count"]),
                       int(r["value_sum"])) for r in _committed(tmp_path))

    ways = []
    for crash_at in (CRASH_AT["after_precommit"], CRASH_AT["mid_sink_commit"]):
        crashed = crashed_run(spec_path, crash_at)
        assert crashed.returncode == -9, f"{crash_at}: exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
        ways.append(recover(spec_path))
        assert_sub_multiset(committed(), reference, f"a crash at {crash_at} and {ways[-1]}")
    assert ways[-1] == "restore"  # the sink commit comes after a completed checkpoint
    finish(spark, spec_path)
    missing, duplicated = lost_and_duplicated(committed(), reference)
    figures.update({"crashes": len(ways), "recoveries": ways, "rows": len(reference), "missing": missing,
                    "extra or duplicated": duplicated})
    assert committed() == reference and len(reference) == 30 * KEYS


@pytest.mark.slow(60)
def test_the_connector_feeds_the_first_stage_of_two(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, figures: dict[str, object]) -> None:
    from barrierflow.runtime.pipeline import StagedPipelineJob
    from barrierflow.spec import parse_staged_spec

    topic = f"sk-staged-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 2)
    _produce(kafka_endpoint, topic, {0: _records(0, 300), 1: _records(1, 200)})
    source = yaml.safe_load(_spec(tmp_path, kafka_endpoint, topic, windows=False, per_batch=100).read_text())
    columns = {"src_partition": "long", "src_offset": "long", "value": "long"}
    spec = parse_staged_spec({
        "name": "skstaged", "work_dir": str(tmp_path / "work"),
        "channels": [{"name": "ab", "topic": f"ab-{uuid.uuid4().hex[:8]}", "partitions": 2,
                      "bootstrap": kafka_endpoint.bootstrap_servers}],
        "stages": [
            {"name": "a", "sources": source["sources"],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_partition": "partition", "src_offset": "offset",
                                                        "value": "value"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b", "sources": [{"type": "channel", "channel": "ab", "json_fields": columns}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {name: name for name in columns}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "500ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    })
    result = StagedPipelineJob(spec, spark=spark).run(until_exhausted=True, duration=240)
    rows = _committed(tmp_path)
    assert sorted((r["src_partition"], r["src_offset"], r["value"]) for r in rows) == sorted(
        [(0, i, i) for i in range(300)] + [(1, i, 100_000 + i) for i in range(200)])
    cut = result.stage_manifests["a"][-1].barrier_offsets["events"]
    assert cut == {f"{topic}:0": 300, f"{topic}:1": 200}
    figures.update({"global checkpoints": len(result.completed), "rows": len(rows)})


@pytest.mark.slow(70)
def test_chaos_passes_a_pipeline_read_by_the_connector(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, figures: dict[str, object]) -> None:
    for name, value in short_lived_driver_env().items():
        monkeypatch.setenv(name, value)
    topic = f"sk-chaos-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_endpoint, topic, 1)
    flush = {"key": 0, "value": 0, "event_time": (T0 + timedelta(seconds=20)).isoformat()}
    _produce(kafka_endpoint, topic, {0: [*_records(0, 1000), flush]})
    spec_path = _spec(tmp_path, kafka_endpoint, topic, windows=True, per_batch=100)
    capsys.readouterr()
    code = main(["chaos", str(spec_path), "--scratch", str(tmp_path / "scratch"), "--json", "--kills", "1",
                 "--seed", "5", "--mode", "mixed", "--min-gap", "3", "--max-gap", "6", "--point-share", "0"])
    report = json.loads(capsys.readouterr().out)
    figures.update({key: report[key] for key in ("kills", "runs", "checkpoints", "rows_expected", "rows", "missing",
                                                 "extra", "duplicated", "seconds")})
    assert report["problem"] is None, report["problem"]
    assert report["rows_expected"] == 10 * KEYS and report["kills_total"] == 1
    assert (report["missing"], report["extra"], report["duplicated"]) == (0, 0, 0)
    assert code == 0 and report["passed"]
