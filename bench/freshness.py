"""``python -m bench --scenario freshness``: how late committed output becomes visible, measured
by the run and by an independent reader, side by side.

A producer thread writes ``--rate`` JSON records per second (for ``--seconds`` plus the start-up)
to a topic of two partitions on the embedded broker (Apache Kafka), each with the broker-side
record timestamp of its send (CreateTime: its arrival). The pipeline (barrierflow's Kafka reader
-> a projection keeping the record timestamp -> Parquet, 1 s checkpoints) runs for ``--seconds``
in this process's SparkSession. Meanwhile a thread lists the Parquet sink's directory every few
milliseconds and notes when each committed part file became visible (the independent reader).

Printed per checkpoint that made records visible after the first completed one (which holds the
start-up's backlog), as p50 / p99 / max (nearest rank), seconds:

* the run's freshness (``barrierflow_checkpoint_freshness_seconds``: the sink's commit time
  minus the oldest arrival among the records it made visible; docs/operations.md);
* the reader's: when the last part file of the checkpoint's epoch became visible, minus the
  oldest record timestamp in those files.

Not measured here (item of the same target, to come): a Kafka sink read by ``read_committed``
and a PostgreSQL sink read by a polling SELECT. The figures are printed, never asserted: a
benchmark, not a test; record them only from a quiet machine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Checkpoint interval of the measured pipeline (seconds): the figures' target is set for it.
INTERVAL = 1.0


def _percentile(values: list[float], fraction: float) -> float:
    from barrierflow.runtime.freshness import percentile

    return percentile(values, fraction)


class DirectoryWatch(threading.Thread):
    """The independent reader of a Parquet sink: lists ``directory`` every few milliseconds and
    notes when each committed part file (``part-*.parquet``) was first seen (UTC). The tests use it too."""

    def __init__(self, directory: Path) -> None:
        super().__init__(daemon=True, name="freshness-reader")
        self.directory = directory
        self.first_seen: dict[str, datetime] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.005):
            try:
                names = [e.name for e in os.scandir(self.directory)]
            except FileNotFoundError:
                continue
            now = datetime.now(UTC)
            for name in names:
                if name.startswith("part-") and name.endswith(".parquet"):
                    self.first_seen.setdefault(name, now)


def _produce(servers: str, topic: str, rate: float, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    sent, began = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - began) * rate)
        for _ in range(due - sent):
            producer.produce(topic, json.dumps({"id": sent}).encode(), partition=sent % 2)
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)


def _spec(work: Path, servers: str, topic: str) -> dict[str, Any]:
    return {
        "version": 1, "name": f"fresh-{uuid.uuid4().hex[:8]}", "work_dir": str(work / "work"),
        "sources": [{"name": "in", "type": "kafka", "bootstrap_servers": servers, "topics": [topic],
                     "format": "json", "json_fields": {"id": "long"}}],
        "transformation": {"function": "barrierflow.transforms.projection:project", "output_mode": "append",
                           "options": {"columns": {"id": "id", "arrived": "timestamp"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{work / 'out'}"}],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": INTERVAL, "timeout": 120.0,
                       "tolerable_failed_checkpoints": 1000},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }


def _reader_figures(result: Any, watch: DirectoryWatch, out: Path, skip: int | None) -> list[float]:
    import pyarrow.parquet as pq

    figures = []
    for manifest in result.completed:
        if manifest.checkpoint_id == skip:
            continue
        names = [n for n in watch.first_seen
                 if manifest.first_batch_id <= int(n.split("-")[1]) <= manifest.spark_batch_id]
        if not names:
            continue
        oldest = min(t for n in names for t in pq.read_table(out / n, columns=["arrived"]).column("arrived")
                     .to_pylist())
        oldest = oldest.replace(tzinfo=UTC) if oldest.tzinfo is None else oldest  # Parquet keeps UTC instants
        figures.append((max(watch.first_seen[n] for n in names) - oldest).total_seconds())
    return figures


def run_freshness_benchmark(seconds: float, rate: float, markdown: str | None = None) -> list[str]:
    """Measure (module docstring); print and return the table's lines (also written to ``markdown``)."""
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.runtime.session import build_session
    from barrierflow.spec import parse_spec
    from barrierflow.spec.models import SparkSpec
    from confluent_kafka.admin import AdminClient, NewTopic

    started, load = datetime.now(UTC), os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bf-fresh-bench-"))
    stop = threading.Event()
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        servers = stack.enter_context(embedded_broker(None, 60.0, 10.0))
        topic = f"fresh-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": servers})  # held until its futures are done
        for future in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values():
            future.result(30)
        spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                              app_name="barrierflow-freshness-bench")
        producer = threading.Thread(target=_produce, args=(servers, topic, rate, stop), daemon=True)
        producer.start()
        stack.callback(producer.join)
        stack.callback(stop.set)
        watch = DirectoryWatch(work / "out")
        watch.start()
        job = StreamingJob(parse_spec(_spec(work, servers, topic)), spark=spark)
        result = job.run(duration=seconds)
        watch.done.set()
        watch.join()
        # After the first completed checkpoint: the first holds the backlog of the start-up.
        first = result.completed[0].checkpoint_id if result.completed else None
        ours = [f.seconds for figures in result.freshness.values() for f in figures if f.checkpoint_id != first]
        theirs = _reader_figures(result, watch, work / "out", skip=first)
    lines = [f"Freshness of committed output, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
             f"{load:.1f}: Kafka ({rate:g} records/s, 2 partitions) -> Parquet, {INTERVAL:g} s checkpoints, "
             f"{seconds:g} s, {len(result.completed)} checkpoints completed; seconds per checkpoint that made "
             "records visible, after the first completed one", "",
             "| measured by | checkpoints | p50 | p99 | max |", "|---|---|---|---|---|"]
    for label, values in (("the run (commit minus oldest arrival)", ours),
                          ("directory listing (visible minus oldest record timestamp)", theirs)):
        if values:
            lines.append(f"| {label} | {len(values)} | {_percentile(values, 0.5):.2f} | "
                         f"{_percentile(values, 0.99):.2f} | {max(values):.2f} |")
        else:
            lines.append(f"| {label} | 0 | - | - | - |")
    print("\n".join(lines))
    if markdown:
        Path(markdown).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines
