"""Event-time TTL in a stage that reads a channel: the same keyed function and expiry as in a
pipeline of one stage, with the watermark coming from the channel's event times.

generator -> (stage ``a``: the churning keys only) -> channel ``c`` (Kafka) -> (stage ``b``:
running totals with ``ttl: 60s`` and ``emit_on_expiry``) -> Parquet. Each derived key lives one
two-minute block of event time and never returns, so its one lifetime is its block's records,
whatever the batches; it expires once the watermark passes its last record + 60 s. Stage ``a``
cuts 10 s of event time per batch, so no record reaches stage ``b`` more than a few seconds
behind the newest one read (no lifetime is cut by a record arriving after its key expired).
Expected output: plain Python over the generator's records, and the watermark of stage ``b``'s
last batch as its Spark offset log records it (a key expired by the end when that watermark
reached its last record + 60 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.keyed_state.figures import KeyFigures
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.spec import parse_staged_spec

from tests.keyed_state.churn import observed_lives
from tests.keyed_state.transforms import START_S, churning_key
from tests.support.kafka_broker import KafkaEndpoint

pytestmark = [pytest.mark.spark]

RECORDS = 300  # per partition: 10 minutes of event time at one record per 2 s
STEP_S = 2
PER_BATCH = 5  # records per partition and batch of stage a: 10 s of event time
TTL_S = 60
DELAY_S = 10


def _spec(folder: Path, endpoint: KafkaEndpoint) -> dict[str, Any]:
    return {
        "name": "churn-channel", "work_dir": str(folder / "work"),
        "channels": [{"name": "c", "topic": f"churn-{folder.name}", "partitions": 2,
                      "bootstrap": endpoint.bootstrap_servers}],
        "event_time": {"column": "event_time", "watermark_delay": f"{DELAY_S}s"},
        "stages": [
            {"name": "a",
             "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                          "max_records_per_batch": PER_BATCH, "records_per_partition": RECORDS, "keys": 10,
                          "event_time_step_ms": STEP_S * 1000}],
             "transformation": {"function": "tests.keyed_state.transforms:churning_only"},
             "sinks": [{"type": "channel", "channel": "c", "key_column": "key"}]},
            {"name": "b",
             "sources": [{"type": "channel", "channel": "c",
                          "json_fields": {"key": "long", "value": "long", "event_time": "timestamp"}}],
             "transformation": {"function": "tests.keyed_state.transforms:churning_totals", "output_mode": "update",
                                "ttl": f"{TTL_S}s", "emit_on_expiry": True},
             "sinks": [{"name": "results", "type": "parquet", "path": f"file://{folder / 'out'}"}]},
        ],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": "1s", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "state_store": "rocksdb"},
    }


def _expected(final_watermark_ms: int) -> dict[int, list[tuple[int, int, bool]]]:
    """Derived key -> its one lifetime (count, value sum, expired by the final watermark)."""
    rows: dict[int, list[tuple[float, int]]] = {}
    for p in range(2):
        for i in range(RECORDS):
            n = i * 2 + p
            if n % 10 < 5:
                event_s = START_S + i * STEP_S
                rows.setdefault(churning_key(n % 10, event_s), []).append((event_s, (n * 2654435761) % 1000))
    return {key: [(len(r), sum(v for _, v in r), (max(e for e, _ in r) + TTL_S) * 1000 <= final_watermark_ms)]
            for key, r in rows.items()}


@pytest.mark.slow(60)
def test_a_stage_reading_a_channel_expires_keys_by_the_channels_event_time(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    result = StagedPipelineJob(parse_staged_spec(_spec(tmp_path, kafka_endpoint)), spark=spark).run(
        until_exhausted=True, duration=600)
    (checkpoint,) = [p for p in (tmp_path / "work").rglob("spark-checkpoint") if "b" in p.parent.parts[-2:]]
    batches = spark_batches_of_channel(checkpoint)
    final_watermark = batches[max(batches)]
    # the watermark came from the channel's event times: at most the newest one minus the delay
    # (the run ends at the end of its input, so its last batch may run with an earlier one), and
    # well past the start
    newest = START_S + (RECORDS - 1) * STEP_S
    assert (START_S + RECORDS) * 1000 < final_watermark <= (newest - DELAY_S) * 1000, final_watermark

    rows = [r.asDict() for r in spark.read.parquet(str(tmp_path / "out")).selectExpr(
        "*", "CAST(regexp_extract(_metadata.file_name, '^part-([0-9]+)-', 1) AS BIGINT) AS batch").collect()]
    lives = _expected(final_watermark)
    assert observed_lives(rows) == lives
    assert sum(1 for v in lives.values() if v[0][2]) >= len(lives) // 2  # keys expired all through the run

    assert result.stages["a"].keys is None  # stage a has no keyed function
    keys = result.stages["b"].keys
    assert keys == KeyFigures(started=len(lives), expired=sum(1 for v in lives.values() if v[0][2]),
                              live=sum(1 for v in lives.values() if not v[0][2])), keys


def spark_batches_of_channel(checkpoint: Path) -> dict[int, int]:
    """batch id -> its watermark (ms), from Spark's offset log of a stage reading a channel."""
    import json

    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            out[int(path.name)] = int(json.loads(path.read_text(encoding="utf-8").splitlines()[1])["batchWatermarkMs"])
    return out
