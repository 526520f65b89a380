"""The churning-keys pipeline of the TTL tests, its expected output in plain Python, and what
Spark's own files say about its batches (read independently of barrierflow)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.keyed_state.transforms import START_S, churning_key
from tests.support.in_session_runs import write_spec

PARTITIONS = 2
RECORDS = 900          # per partition: 30 minutes of event time at one record per 2 s
STEP_S = 2
PER_BATCH = 50         # records per partition and batch: 100 s of event time per batch
TTL_S = 60
DELAY_S = 10


def churn_spec(folder: Path, *, ttl: bool, name: str = "churn", dedup: bool = False) -> Path:
    """generator -> churning_totals (update mode) -> Parquet at ``folder/out``; with ``ttl``:
    ``ttl: 60s`` and ``emit_on_expiry``, RocksDB state. ``dedup``: churning_dedup (append mode)
    with ``ttl: 60s`` instead."""
    transformation: dict[str, Any] = {"function": "tests.keyed_state.transforms:churning_totals",
                                      "output_mode": "update"}
    if ttl:
        transformation.update(ttl=f"{TTL_S}s", emit_on_expiry=True)
    if dedup:
        transformation = {"function": "tests.keyed_state.transforms:churning_dedup", "output_mode": "append",
                          "ttl": f"{TTL_S}s"}
    folder.mkdir(parents=True, exist_ok=True)
    return write_spec(folder / "spec.yaml", {
        "version": 1, "name": name, "work_dir": str(folder / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": PER_BATCH, "records_per_partition": RECORDS, "keys": 10,
                     "event_time_step_ms": STEP_S * 1000}],
        "event_time": {"column": "event_time", "watermark_delay": f"{DELAY_S}s"},
        "transformation": transformation,
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{folder / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": "1s", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "state_store": "rocksdb" if ttl or dedup else "hdfs"},
    })


def records(end: dict[int, int] | None = None) -> list[tuple[int, float, int]]:
    """(derived key, event time in s, value) of every generator record (of offsets below ``end``
    per partition): record i of partition p is n = i * 2 + p, key n % 10, value
    n * 2654435761 % 1000, event time START + 2 i."""
    out = []
    for p in range(PARTITIONS):
        for i in range(RECORDS if end is None else end[p]):
            n = i * PARTITIONS + p
            event_s = START_S + i * STEP_S
            out.append((churning_key(n % 10, event_s), event_s, (n * 2654435761) % 1000))
    return out


def expected_lives() -> dict[int, list[tuple[int, int, bool]]]:
    """key -> its state lifetimes in event-time order, each (count, value sum, expired): a
    lifetime ends where the key's next record is more than the TTL after its previous one; it
    expired when the input's last watermark (newest event time - delay) reached its last record + TTL."""
    by_key: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for key, event_s, value in records():
        by_key[key].append((event_s, value))
    final_watermark = START_S + (RECORDS - 1) * STEP_S - DELAY_S
    lives: dict[int, list[tuple[int, int, bool]]] = {}
    for key, rows in by_key.items():
        rows.sort()
        segments: list[list[tuple[float, int]]] = [[rows[0]]]
        for row in rows[1:]:
            if row[0] - segments[-1][-1][0] > TTL_S:
                segments.append([])
            segments[-1].append(row)
        lives[key] = [(len(s), sum(v for _, v in s), s[-1][0] + TTL_S <= final_watermark) for s in segments]
    return lives


def observed_lives(rows: list[dict[str, Any]]) -> dict[int, list[tuple[int, int, bool]]]:
    """The same from a run's output rows (``key, count, value_sum, expired, batch``): per key in
    batch order (in a batch, a key's expiry row comes first: it ends the lifetime its update
    follows), a lifetime's last update is the row before its expiry row or before the count
    drops (a new lifetime); asserts no update is written twice."""
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r["batch"], not r["expired"])):
        by_key[row["key"]].append(row)
    lives: dict[int, list[tuple[int, int, bool]]] = {}
    for key, updates in by_key.items():
        found: list[tuple[int, int, bool]] = []
        last: dict[str, Any] | None = None
        for row in updates:
            if row["expired"]:
                assert last is not None and (row["count"], row["value_sum"]) == (last["count"], last["value_sum"])
                found.append((row["count"], row["value_sum"], True))
                last = None
                continue
            if last is not None:
                assert row["count"] > last["count"], f"key {key}: update {row} after {last} (written twice?)"
            last = row
        if last is not None:
            found.append((last["count"], last["value_sum"], False))
        lives[key] = found
    return lives


def spark_batches(checkpoint: Path) -> dict[int, tuple[int, dict[int, int]]]:
    """batch id -> (its watermark in ms, the generator's end offset per partition), from Spark's
    offset log (``offsets/<id>``: version line, metadata JSON, the source's end offset JSON,
    whose ``partitions`` are the generator's offsets)."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if not path.name.isdigit():
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        metadata, offsets = json.loads(lines[1]), json.loads(lines[2])
        ends = {int(p): int(o) for p, o in offsets["partitions"].items()}
        out[int(path.name)] = (int(metadata["batchWatermarkMs"]), ends)
    return out


def live_keys(watermark_ms: int, end: dict[int, int]) -> int:
    """Keys whose newest record (of offsets below ``end``) + TTL is after ``watermark_ms``."""
    newest: dict[int, float] = {}
    for key, event_s, _ in records(end):
        newest[key] = max(newest.get(key, event_s), event_s)
    return sum(1 for s in newest.values() if (s + TTL_S) * 1000 > watermark_ms)


def seen_keys(end: dict[int, int]) -> int:
    """Distinct keys of the records below ``end``."""
    return len({key for key, _, _ in records(end)})


def expected_firsts() -> list[tuple[int, int, float]]:
    """(key, value, event time in s) of the first record of every lifetime of every key: a
    lifetime ends where the key's next record is more than the TTL after its previous one."""
    by_key: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for key, event_s, value in records():
        by_key[key].append((event_s, value))
    firsts = []
    for key, rows in by_key.items():
        rows.sort()
        previous = None
        for event_s, value in rows:
            if previous is None or event_s - previous > TTL_S:
                firsts.append((key, value, event_s))
            previous = event_s
    return sorted(firsts)


def expected_watermark(batches: dict[int, tuple[int, dict[int, int]]], batch: int) -> int:
    """The watermark Spark gives ``batch`` in a failure-free run: the newest event time of the
    records of the batches before it (below the previous batch's end offsets) minus the delay
    (0 for the first batch)."""
    if batch == 0:
        return 0
    read = max(batches[batch - 1][1].values())
    return (START_S + (read - 1) * STEP_S - DELAY_S) * 1000
