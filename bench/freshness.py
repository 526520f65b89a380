"""``python -m bench --scenario freshness [--sink parquet|kafka|postgres ...]``: how late committed
output becomes visible, measured by the run and by an independent reader, side by side.

A producer process writes ``--rate`` JSON records per second (for ``--seconds`` plus the start-up)
to a topic of two partitions on the embedded broker (Apache Kafka), each with the broker-side
record timestamp of its send (CreateTime: its arrival). The pipeline (barrierflow's Kafka reader
-> a projection keeping the record timestamp as ``arrived`` -> the sink, 1 s checkpoints) runs for
``--seconds`` in this process's SparkSession. Meanwhile another process reads the sink as a user of
its output would, and notes when each record (or part file) first became visible:

* **parquet**: lists the sink's directory every 5 ms (:class:`DirectoryWatch`); a checkpoint's
  records are its epoch's part files.
* **kafka**: a consumer with ``isolation.level=read_committed`` on the output topic
  (:class:`CommittedTopicWatch`, confluent-kafka; what ``kcat -X isolation.level=read_committed``
  shows); a checkpoint's records are those whose ``bf-epoch`` header names it.
* **postgres**: a ``SELECT`` every 5 ms of the rows not yet seen (:class:`PollingSelect`, psycopg,
  autocommit); a checkpoint's rows are those that became visible in one burst (rows of one
  ``COMMIT PREPARED`` appear together; bursts are more than a third of the interval apart).

The driver first makes one run of ``--warm-up`` seconds into the first sink, not measured (a fresh
driver's first batch ran 16.5 s for 200,000 backlog records, against 2.3 s in its second run).
Each run then first goes ``--warm-up`` seconds (default :data:`WARM_UP`) with the producer at its rate,
so that the start-up's backlog drains and the JVM's JIT settles; only checkpoints triggered after
it are measured (the steady state a long-running pipeline is in). The warm-up's checkpoints are
printed on a row of their own, never left out silently. Printed per sink, per measured checkpoint
that made records visible, as p50 / p99 / max (nearest rank), seconds:

* the run's freshness (``barrierflow_checkpoint_freshness_seconds``: the sink's commit time
  minus the oldest arrival among the records it made visible; docs/operations.md);
* the reader's: when the checkpoint's last record became visible, minus the oldest ``arrived``
  among its records.

The figures are printed, never asserted: a benchmark, not a test; record them only from a quiet
machine.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Checkpoint interval of the measured pipeline (seconds): the figures' target is set for it.
INTERVAL = 1.0
#: Seconds each run goes before its checkpoints are measured: the start-up's backlog drains and
#: the JVM's JIT settles (the first batches of a fresh driver run many times slower).
WARM_UP = 20.0


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


def _produce(servers: str, topic: str, rate: float, stop: Any) -> None:
    """Send ``rate`` records per second to ``topic`` until ``stop`` (an event) is set; run in a
    process of its own (:func:`_measure_sink`), so the measured driver's Python shares no GIL
    with it."""
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


class CommittedTopicWatch(threading.Thread):
    """The independent reader of a Kafka sink: a ``read_committed`` consumer of ``topic`` that
    notes, per record, when it was first delivered (UTC), its ``arrived`` and its ``bf-epoch``
    header (the checkpoint that committed it)."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(daemon=True, name="freshness-kafka-reader")
        self.servers, self.topic = servers, topic
        self.seen: list[tuple[datetime, datetime, int | None]] = []
        self.done = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": f"fresh-{uuid.uuid4().hex[:8]}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 5})
        consumer.subscribe([self.topic])
        try:
            while not self.done.is_set():
                messages = consumer.consume(10_000, timeout=0.05)
                now = datetime.now(UTC)  # when they were delivered, not after decoding the ones before them
                for message in messages:
                    if message.error():
                        continue
                    headers = dict(message.headers() or [])
                    epoch = headers.get("bf-epoch")
                    arrived = datetime.fromisoformat(json.loads(message.value())["arrived"])
                    self.seen.append((now, arrived if arrived.tzinfo else arrived.replace(tzinfo=UTC),
                                      int(epoch) if epoch is not None else None))
        finally:
            consumer.close()


class PollingSelect(threading.Thread):
    """The independent reader of a PostgreSQL sink: every 5 ms, ``SELECT id, arrived`` of the rows
    above the longest run of ids seen from 0 (autocommit: each SELECT sees what is committed),
    noting when each id was first seen (UTC)."""

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__(daemon=True, name="freshness-postgres-reader")
        self.dsn, self.table = dsn, table
        self.seen: dict[int, tuple[datetime, datetime]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        prefix = -1  # every id <= prefix was seen
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            while not self.done.wait(0.005):
                rows = connection.execute(f"SELECT id, arrived FROM {self.table} WHERE id > %s",
                                          (prefix,)).fetchall()
                now = datetime.now(UTC)
                for row_id, arrived in rows:
                    self.seen.setdefault(int(row_id), (now, arrived))
                while prefix + 1 in self.seen:
                    prefix += 1


def _read_in_process(kind: str, args: tuple[Any, ...], connection: Any) -> None:
    """A child process's body: run the reader of ``kind`` (``args`` its constructor's) until a
    message arrives on ``connection``, then send back what it saw (``first_seen`` or ``seen``)."""
    reader: DirectoryWatch | CommittedTopicWatch | PollingSelect
    reader = {"parquet": DirectoryWatch, "kafka": CommittedTopicWatch, "postgres": PollingSelect}[kind](*args)
    reader.start()
    connection.send("started")
    connection.recv()
    reader.done.set()
    reader.join()
    connection.send(reader.first_seen if isinstance(reader, DirectoryWatch) else reader.seen)


class ReaderProcess:
    """The independent reader of one sink in a process of its own (spawned: the measured
    driver's process holds a JVM gateway and threads), so that the reader's decoding (20,000
    records a second for Kafka) does not compete with the driver's Python for its GIL.
    :meth:`start` returns once the reader runs; :meth:`finish` stops it and returns what it saw."""

    def __init__(self, kind: str, *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._ours, theirs = context.Pipe()
        self._process = context.Process(target=_read_in_process, args=(kind, args, theirs), daemon=True,
                                        name=f"freshness-{kind}-reader")

    def start(self) -> None:
        self._process.start()
        if not self._ours.poll(120) or self._ours.recv() != "started":
            raise RuntimeError("the freshness reader process did not start within 120 s")

    def finish(self) -> Any:
        self._ours.send("stop")
        seen = self._ours.recv()
        self._process.join(30)
        return seen


def _spec(work: Path, servers: str, topic: str, sink: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1, "name": f"fresh-{uuid.uuid4().hex[:8]}", "work_dir": str(work / "work"),
        "sources": [{"name": "in", "type": "kafka", "bootstrap_servers": servers, "topics": [topic],
                     "format": "json", "json_fields": {"id": "long"}}],
        "transformation": {"function": "barrierflow.transforms.projection:project", "output_mode": "append",
                           "options": {"columns": {"id": "id", "arrived": "timestamp"}}},
        "sinks": [{"name": "out", **sink}],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": INTERVAL, "timeout": 120.0,
                       "tolerable_failed_checkpoints": 1000},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }


def _directory_figures(result: Any, first_seen: dict[str, datetime], out: Path, measured: set[int]) -> list[float]:
    import pyarrow.parquet as pq

    figures = []
    for manifest in result.completed:
        if manifest.checkpoint_id not in measured:
            continue
        names = [n for n in first_seen
                 if manifest.first_batch_id <= int(n.split("-")[1]) <= manifest.spark_batch_id]
        if not names:
            continue
        oldest = min(t for n in names for t in pq.read_table(out / n, columns=["arrived"]).column("arrived")
                     .to_pylist())
        oldest = oldest.replace(tzinfo=UTC) if oldest.tzinfo is None else oldest  # Parquet keeps UTC instants
        figures.append((max(first_seen[n] for n in names) - oldest).total_seconds())
    return figures


def _epoch_figures(seen: list[tuple[datetime, datetime, int | None]], measured: set[int]) -> list[float]:
    """Per measured ``bf-epoch``: the last record's visibility minus the oldest arrival."""
    groups: dict[int, list[tuple[datetime, datetime]]] = {}
    for visible, arrived, epoch in seen:
        if epoch is not None and epoch in measured:
            groups.setdefault(epoch, []).append((visible, arrived))
    return [(max(v for v, _ in rows) - min(a for _, a in rows)).total_seconds() for _, rows in sorted(groups.items())]


def _burst_figures(seen: list[tuple[datetime, datetime]], cutoff: datetime | None) -> list[float]:
    """Rows that became visible together (gaps under a third of the interval), the bursts seen
    before ``cutoff`` left out (None: only the first, the start-up's backlog): per burst, its
    last visibility minus its oldest arrival."""
    bursts: list[list[tuple[datetime, datetime]]] = []
    for visible, arrived in sorted(seen):
        if bursts and (visible - bursts[-1][-1][0]).total_seconds() < INTERVAL / 3:
            bursts[-1].append((visible, arrived))
        else:
            bursts.append([(visible, arrived)])
    kept = bursts[1:] if cutoff is None else [rows for rows in bursts if max(v for v, _ in rows) >= cutoff]
    return [(max(v for v, _ in rows) - min(a for _, a in rows)).total_seconds() for rows in kept]


def _percentiles_row(label: str, values: list[float]) -> str:
    if not values:
        return f"| {label} | 0 | - | - | - |"
    return (f"| {label} | {len(values)} | {_percentile(values, 0.5):.2f} | {_percentile(values, 0.99):.2f} | "
            f"{max(values):.2f} |")


@dataclass
class SinkRun:
    """One run into a sink: the run's figures and the reader's for the measured checkpoints
    (triggered ``warm_up`` seconds or more after the run began), the run's figures of the
    warm-up's checkpoints, how the reader read, and the checkpoints completed (all of them)."""

    ours: list[float]
    theirs: list[float]
    warm_up: list[float]
    how: str
    completed: int


def _measure_sink(kind: str, seconds: float, rate: float, servers: str, spark: Any,
                  dsn: str | None, warm_up: float = 0.0) -> SinkRun:
    """One run into a sink of ``kind``, ``warm_up`` plus ``seconds`` long (:class:`SinkRun`).
    Without a warm-up, the first completed checkpoint (the start-up's backlog) is left out."""
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import parse_spec
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix=f"bf-fresh-{kind}-"))
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        topic, out_topic, table = (f"fresh-{uuid.uuid4().hex[:8]}", f"fresh-out-{uuid.uuid4().hex[:8]}",
                                   f"fresh_{uuid.uuid4().hex[:8]}")
        admin = AdminClient({"bootstrap.servers": servers})  # held until its futures are done
        wanted = [NewTopic(topic, num_partitions=2, replication_factor=1)]
        if kind == "kafka":
            wanted += [NewTopic(out_topic, num_partitions=2, replication_factor=1),
                       NewTopic("__barrierflow_commits", num_partitions=1, replication_factor=1)]
        for name, future in admin.create_topics(wanted).items():
            try:
                future.result(30)
            except Exception:
                if name != "__barrierflow_commits":  # made by an earlier sink's run
                    raise
        if kind == "parquet":
            sink: dict[str, Any] = {"type": "parquet", "path": f"file://{work / 'out'}"}
            reader = ReaderProcess(kind, work / "out")
        elif kind == "kafka":
            sink = {"type": "kafka", "bootstrap_servers": servers, "topic": out_topic}
            reader = ReaderProcess(kind, servers, out_topic)
        else:
            import psycopg

            assert dsn is not None
            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, arrived timestamptz NOT NULL)")
            sink = {"type": "postgres", "table": table, "dsn_env": "BARRIERFLOW_FRESHNESS_DSN"}
            os.environ["BARRIERFLOW_FRESHNESS_DSN"] = dsn
            reader = ReaderProcess(kind, dsn, table)
        producer = context.Process(target=_produce, args=(servers, topic, rate, stop), daemon=True,
                                   name="freshness-producer")
        reader.start()
        producer.start()
        stack.callback(producer.join, 60)
        stack.callback(stop.set)
        began = datetime.now(UTC)
        result = StreamingJob(parse_spec(_spec(work, servers, topic, sink)), spark=spark).run(
            duration=warm_up + seconds)
        time.sleep(2 * INTERVAL)  # the reader sees the last commit (it polls every few milliseconds)
        seen = reader.finish()
        if warm_up > 0:  # checkpoints triggered once the warm-up is over
            measured = [m for m in result.completed if (m.trigger_time - began).total_seconds() >= warm_up]
        else:  # after the first completed checkpoint: the first holds the backlog of the start-up
            measured = result.completed[1:]
        ids = {m.checkpoint_id for m in measured}
        figures = [f for per_sink in result.freshness.values() for f in per_sink]
        ours = [f.seconds for f in figures if f.checkpoint_id in ids]
        early = [f.seconds for f in figures if f.checkpoint_id not in ids]
        if kind == "parquet":
            theirs, how = _directory_figures(result, seen, work / "out", ids), "directory listing"
        elif kind == "kafka":
            theirs, how = _epoch_figures(seen, ids), "read_committed consumer, per bf-epoch"
        else:
            # a measured checkpoint's rows become visible after it completed; the one before's earlier
            cutoff = measured[0].completion_time if measured else None
            theirs, how = _burst_figures(list(seen.values()), cutoff), "polling SELECT, per burst"
    return SinkRun(ours, theirs, early, how, len(result.completed))


#: Where each run's record goes (``YYYY-MM-DD-HHMM.md`` and ``.json``).
RESULTS = Path(__file__).resolve().parent / "results" / "freshness"


def run_freshness_benchmark(seconds: float, rate: float, markdown: str | None = None,
                            sinks: tuple[str, ...] = ("parquet",), rounds: int = 1,
                            results: Path | None = RESULTS,
                            command: str = "python -m bench --scenario freshness",
                            warm_up: float = WARM_UP) -> list[str]:
    """Measure (module docstring) into each of ``sinks`` in turn, ``rounds`` times (the sinks
    alternating), each run ``warm_up`` seconds before its ``seconds`` measured; print and return
    the table's lines (also written to ``markdown``), and write the record (the command, commit,
    date, load average, every checkpoint's figures, the warm-up's too) to ``results`` unless it
    is None."""
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.session import build_session
    from barrierflow.spec.models import SparkSpec

    from bench.provenance import commit
    from bench.record import free_stem

    started, load, revision = datetime.now(UTC), os.getloadavg()[0], commit()
    rows: list[str] = []
    completed: list[str] = []
    figures: dict[str, list[dict[str, Any]]] = {kind: [] for kind in sinks}
    with ExitStack() as stack:
        servers = stack.enter_context(embedded_broker(None, 60.0, 10.0))
        dsn = None
        if "postgres" in sinks:
            from tests.support.postgres_server import running_postgres

            dsn = stack.enter_context(running_postgres()).dsn
        spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                              app_name="barrierflow-freshness-bench")
        if warm_up > 0:  # the driver's first run: its first batch runs many times slower (cold JVM and workers)
            first = _measure_sink(sinks[0], 0.0, rate, servers, spark, dsn, warm_up)
            rows.append(_percentiles_row(f"{sinks[0]}: the driver's first run, {warm_up:g} s (not measured)",
                                         first.warm_up))
        for number in range(1, rounds + 1):
            for kind in sinks:
                run = _measure_sink(kind, seconds, rate, servers, spark, dsn, warm_up)
                label = f"{kind}, round {number}" if rounds > 1 else kind
                rows += [_percentiles_row(f"{label}: the run (commit minus oldest arrival)", run.ours),
                         _percentiles_row(f"{label}: {run.how} (visible minus oldest arrival)", run.theirs),
                         _percentiles_row(f"{label}: the run, during the warm-up (not measured)", run.warm_up)]
                completed.append(f"{label} {run.completed}")
                figures[kind].append({"round": number, "checkpoints": run.completed, "run": run.ours,
                                      "reader": run.theirs, "reader_kind": run.how, "warm_up_run": run.warm_up})
    for kind in sinks if rounds > 1 else ():
        rows += [_percentiles_row(f"{kind}, all rounds: the run", [v for r in figures[kind] for v in r["run"]]),
                 _percentiles_row(f"{kind}, all rounds: the reader", [v for r in figures[kind] for v in r["reader"]])]
    load_end = os.getloadavg()[0]
    lines = [f"Freshness of committed output, {started:%Y-%m-%d %H:%M} UTC, commit {revision}, {os.cpu_count()} "
             f"cores, load average {load:.1f} at the start, {load_end:.1f} at the end: Kafka ({rate:g} records/s, "
             f"2 partitions) -> {', '.join(sinks)}, {INTERVAL:g} s checkpoints, {seconds:g} s measured per sink "
             f"after a warm-up of {warm_up:g} s, {rounds} round(s), checkpoints completed: {', '.join(completed)}; "
             "seconds per checkpoint that made records visible, of the checkpoints triggered after the warm-up"
             + ("" if warm_up > 0 else " (none: after the first completed one)"), "",
             "| measured by | checkpoints | p50 | p99 | max |", "|---|---|---|---|---|", *rows]
    print("\n".join(lines))
    if markdown:
        Path(markdown).write_text("\n".join(lines) + "\n", encoding="utf-8")
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
        stem = free_stem(results, started)
        stem.with_suffix(".md").write_text(f"# Freshness of committed output, {started:%Y-%m-%d %H:%M} UTC\n\n"
                                           f"`{command}`\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
        document = {"scenario": "freshness", "command": command, "commit": revision,
                    "started": started.isoformat(timespec="seconds"), "cores": os.cpu_count(),
                    "load_average": [load, load_end], "rate": rate, "seconds": seconds, "warm_up": warm_up,
                    "rounds": rounds,
                    "checkpoint_interval": INTERVAL, "sinks": figures}
        stem.with_suffix(".json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"written: {stem}.md, {stem}.json")
    return lines
