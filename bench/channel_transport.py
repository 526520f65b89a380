"""Channel transport benchmark: the transport between stages, before and after.

Pipeline: stage ``gen`` (the built-in generator, 2 partitions, unthrottled, bounded to
``--records`` records) projects ``key, value, event_time`` and writes channel ``ab`` (4
partitions, keyed by ``key``, on the embedded broker, Apache Kafka); stage
``totals`` reads ``ab`` and keeps a running count and sum per key (output mode update) into
``discard``. With ``--stages 3`` a stage ``mid`` (a projection) reads ``ab`` and writes channel
``bc`` (4 partitions, keyed), which ``totals`` reads. Aligned checkpoints every 2 s,
``local[2]``, every stage in one process. A run ends
when a global checkpoint covers every generated record (``until_exhausted``), or fails.

For each micro-batch size (``--batches``, records per ``gen`` micro-batch, split over its 2
partitions) it runs:

* ``before``: the channel writer of ``--baseline`` (default: the last commit with the
  driver-side writer: every micro-batch collected to the driver, one record per Kafka request
  with kafka-python), extracted with ``git archive`` into a temporary directory;
* ``after``: this working tree's code (executors produce their rows in producer batches with
  confluent-kafka; the driver writes the barriers once every task was acknowledged).

Each run is a fresh Python process (one SparkSession each) against one broker started by this
script. It prints, per run: the outcome, the wall time, the records/s end to end (records
``totals`` committed, all of them when the run completed, over the wall time from the
pipeline's start), the records/s after the first batch as :mod:`bench.rates` defines it (from
the end of ``gen``'s first micro-batch to the end of ``totals``' last one),
the records the channel writer wrote and those ``totals`` read (channel offsets, barrier
records included), and per stage the seconds Spark spent in each phase of its micro-batches.
Before the pipelines it prints the raw client ceiling (one Python thread, named so: no ceiling
for a pipeline on 2 cores, and no ratio is taken to it) measured on the same broker in the same
run: records/s produced, and consumed and JSON-decoded, by kafka-python and by confluent-kafka
(JSON values like the channel's, 4 partitions, ``acks=all``).

Usage (from the repository root)::

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python -m bench.channel_transport \\
        [--records 6000000] [--batches 20000,100000] [--stages 2,3] [--baseline REV] [--no-baseline] [--cap 180]

Each run's row is printed as it ends (on stderr); at the end (when a run raised: of the runs that
finished) it prints what ran (command, commit, date, cores, load average) above the ceilings and
the table and writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with the ceilings and every
run's figures (:mod:`bench.record`), to bench/results/channel-transport/.

The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose channel writer collects to the driver (the "before" writer).
BASELINE = "1e1e59b"
RESULT_PREFIX = "RESULT "
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "channel-transport"


def say(line: str = "") -> None:
    """One line of the report on stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- one pipeline run


def pipeline_spec(work: Path, servers: str, *, records: int, batch: int, stages: int = 2) -> dict[str, Any]:
    """The two-stage spec: gen -> channel ab (4 partitions, keyed) -> keyed running totals;
    with ``stages=3``, gen -> ab -> ``mid`` (a projection) -> channel bc (keyed) -> totals."""
    suffix = uuid.uuid4().hex[:8]
    per_partition = batch // 2
    data: dict[str, Any] = {
        "version": 1, "name": f"chbench-{suffix}", "work_dir": str(work / "work"),
        "channels": [{"name": "ab", "topic": f"ab-{suffix}", "partitions": 4, "bootstrap": servers}],
        "stages": [
            {"name": "gen",
             "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                          "max_records_per_batch": per_partition, "keys": 1000,
                          "records_per_partition": records // 2}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"key": "key", "value": "value",
                                                        "event_time": "event_time"}}},
             "sinks": [{"type": "channel", "channel": "ab", "key_column": "key"}]},
            {"name": "totals",
             "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": batch,
                          "json_fields": {"key": "long", "value": "long"}}],
             "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                "output_mode": "update"},
             "sinks": [{"name": "out", "type": "discard"}]},
        ],
        "trigger": {"interval": 0.1},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": 2.0, "timeout": 120.0,
                       "mode": "aligned", "tolerable_failed_checkpoints": 1000},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }
    if stages == 3:
        data["channels"].append({"name": "bc", "topic": f"bc-{suffix}", "partitions": 4, "bootstrap": servers})
        data["stages"].insert(1, {
            "name": "mid",
            "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": batch,
                         "json_fields": {"key": "long", "value": "long"}}],
            "transformation": {"function": "barrierflow.transforms.projection:project",
                               "options": {"columns": {"key": "key", "value": "value"}}},
            "sinks": [{"type": "channel", "channel": "bc", "key_column": "key"}]})
        data["stages"][2]["sources"][0]["channel"] = "bc"
    return data


def run_pipeline(servers: str, records: int, batch: int, cap: float, stages: int = 2) -> dict[str, Any]:
    """Run the pipeline once in this process (whichever barrierflow is on the path)."""
    from barrierflow.runtime.pipeline import StagedPipelineJob
    from barrierflow.spec import parse_staged_spec

    from bench.rates import StageBatchClock, records_through

    work = Path(tempfile.mkdtemp(prefix="bf-chbench-"))
    spec = parse_staged_spec(pipeline_spec(work, servers, records=records, batch=batch, stages=stages))
    job = StagedPipelineJob(spec)
    clock = StageBatchClock("gen", "totals")
    began = time.monotonic()
    outcome, error = "ok", ""
    try:
        result = job.run(until_exhausted=True, duration=cap, progress=clock, progress_every=0.2)
        if time.monotonic() - began >= cap:
            outcome = f"not done within {cap:g}s"
        completed = len(result.completed)
    except Exception as exc:  # the figure to report is the failure itself
        outcome, error, completed = "FAILED", f"{type(exc).__name__}: {exc}"[:400], 0
    ended = time.monotonic()
    steady = float("nan")
    if outcome == "ok" and clock.first_batch is not None:
        gen = next(s for s in job.stages if s.stage.name == "gen")
        steady = clock.rate(records_through(gen.layout.spark_checkpoint, clock.first_batch[0]), records)
    writer = next((s.writer for s in job.stages if s.writer is not None), None)
    written = int(writer.written) if writer is not None else 0
    consumed = _consumed(job)
    phases = _phases(job)
    with contextlib.suppress(Exception):
        job.spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"outcome": outcome, "error": error, "seconds": ended - began, "steady": steady,
            "records": records if outcome == "ok" else consumed, "written": written, "consumed": consumed,
            "checkpoints": completed, "phases": phases}


def _phases(job: Any) -> dict[str, dict[str, float]]:
    """Per stage, over the micro-batches Spark still reports (``recentProgress``): batches,
    input rows and the seconds spent in each phase (``durationMs``: latestOffset is the
    source's planning on the driver, addBatch the batch's execution with its sink)."""
    out: dict[str, dict[str, float]] = {}
    for stage in job.stages:
        progress = list(stage.query.recentProgress) if stage.query is not None else []
        totals: dict[str, float] = {"batches": len(progress),
                                    "rows": sum(p.numInputRows for p in progress)}
        for p in progress:
            for phase, ms in (p.durationMs or {}).items():
                totals[phase] = totals.get(phase, 0.0) + ms / 1000
        out[stage.stage.name] = {k: round(v, 1) for k, v in totals.items()}
    return out


def _consumed(job: Any) -> int:
    """Channel records (data and barrier records) the ``totals`` stage committed: the end
    offsets of its last committed batch, summed over the channel's partitions."""
    from barrierflow.spark import commit_log, offset_log

    stage = next(s for s in job.stages if s.stage.name == "totals")
    last = commit_log.latest_committed(stage.layout.spark_checkpoint)
    if last is None:
        return 0
    return sum((offset_log.first_source_partitions(stage.layout.spark_checkpoint, last) or {}).values())


# --------------------------------------------------------------------------- raw client ceiling


def _values(count: int) -> list[bytes]:
    return [json.dumps({"key": i % 1000, "value": i, "event_time": "2026-01-01T00:00:00.001000Z"},
                       separators=(",", ":")).encode() for i in range(count)]


def client_ceilings(servers: str, records: int) -> dict[str, float]:
    """Records/s produced (acks=all, 4 partitions) by kafka-python and by confluent-kafka."""
    from barrierflow.kafka_io import KafkaIOError, ProducerSettings, shared_producer
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    topics = {name: f"raw-{name}-{uuid.uuid4().hex[:6]}" for name in ("kafka-python", "confluent-kafka")}
    admin = KafkaAdminClient(bootstrap_servers=servers)
    admin.create_topics([NewTopic(t, 4, 1) for t in topics.values()])
    admin.close()
    fast = shared_producer(ProducerSettings(servers=servers))
    deadline = time.monotonic() + 30
    for topic in topics.values():  # ready: the brokers' metadata shows the new topics' partitions
        while True:
            try:
                fast.partitions(topic)
                break
            except KafkaIOError:
                if time.monotonic() > deadline:
                    raise
    out: dict[str, float] = {}
    few = _values(min(records, 100_000))
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", linger_ms=5, batch_size=1_000_000)
    began = time.monotonic()
    for i, value in enumerate(few):
        producer.send(topics["kafka-python"], value=value, partition=i % 4)
    producer.flush()
    out["kafka-python produce"] = len(few) / (time.monotonic() - began)
    producer.close()
    many = _values(records)
    began = time.monotonic()
    fast.send_all(topics["confluent-kafka"], many, [i % 4 for i in range(len(many))])
    fast.settle()
    out["confluent-kafka produce"] = len(many) / (time.monotonic() - began)
    out.update(read_ceilings(servers, topics["confluent-kafka"], len(many)))
    return out


def read_ceilings(servers: str, topic: str, records: int) -> dict[str, float]:
    """Records/s read and JSON-decoded (``json.loads`` per record) from ``topic``'s 4 partitions
    by kafka-python (a consumer assigned per partition, as the old range reads) and by
    confluent-kafka through :class:`barrierflow.kafka_io.consumer.RangeReader` (when present)."""
    from kafka import KafkaConsumer, TopicPartition

    out: dict[str, float] = {}
    consumer = KafkaConsumer(bootstrap_servers=servers, group_id=None, enable_auto_commit=False,
                             isolation_level="read_committed", max_poll_records=10_000)
    ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(4)])
    began, count = time.monotonic(), 0
    for tp, end in ends.items():
        consumer.assign([tp])
        consumer.seek(tp, 0)
        position = 0
        while position < end:
            for record in consumer.poll(timeout_ms=500, max_records=10_000).get(tp, []):
                json.loads(record.value)
                count += 1
                position = record.offset + 1
    consumer.close()
    out["kafka-python consume+decode"] = count / (time.monotonic() - began)
    try:
        from barrierflow.kafka_io.consumer import ConsumerSettings, RangeReader
    except ImportError:  # a tree without the confluent read path
        return out
    reader = RangeReader(ConsumerSettings(servers=servers))
    began, count = time.monotonic(), 0
    for tp, end in ends.items():
        for record in reader.read(topic, tp.partition, 0, end, stall=30.0):
            json.loads(record.value)
            count += 1
    reader.close()
    out["confluent-kafka consume+decode"] = count / (time.monotonic() - began)
    assert count == records, (count, records)
    return out


# --------------------------------------------------------------------------- driver


def baseline_tree(rev: str, into: Path) -> Path:
    """``include/`` of ``rev`` (git archive), for the ``before`` runs."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "include/barrierflow"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "include"


def run_variant(include: Path, servers: str, records: int, batch: int, cap: float, stages: int = 2
                ) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(include), str(ROOT))), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    args = [sys.executable, __file__, "--one", "--servers", servers, "--records", str(records),
            "--batches", str(batch), "--cap", str(cap), "--stages", str(stages)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=cap + 300, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return {"outcome": "CRASHED", "error": (done.stderr or done.stdout)[-400:], "seconds": float("nan"),
            "steady": float("nan"), "records": 0, "written": 0, "checkpoints": 0}


def transport_run(stages: int, batch: int, writer: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """One pipeline run's figures for the record: its shape (``stages``), micro-batch, writer
    label, everything :func:`run_variant` returned, and ``records_per_second`` end to end (records
    over the wall time; 0 when the run has no wall time)."""
    seconds = result["seconds"]
    rate = result["records"] / seconds if seconds == seconds and seconds else 0.0
    return {"stages": stages, "batch": batch, "writer": writer, **result, "records_per_second": rate}


def run_lines(run: Mapping[str, Any]) -> list[str]:
    """One run's table row, a row per stage with its phases' seconds, and its error's first line."""
    lines = [f"| {run['stages']} | {run['batch']:,} | {run['writer']} | {run['outcome']} | {run['seconds']:.1f} "
             f"| {run['records_per_second']:,.0f} | {run['steady']:,.0f} | {run['written']:,} "
             f"| {run.get('consumed', 0):,} | {run['checkpoints']} |"]
    for stage, figures in (run.get("phases") or {}).items():
        lines.append(f"|   |   | {stage}: " + ", ".join(f"{k} {v:g}" for k, v in figures.items()) + " ||||||||")
    if run["error"]:
        lines.append(f"|   |   | error: {run['error'].splitlines()[0]} ||||||||")
    return lines


#: The table's head.
TABLE_HEAD = ["| stages | micro-batch | writer | outcome | wall s | records/s end to end | records/s after first batch "
              "| written to channel | read by totals | global checkpoints |",
              "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"]


def render(ceilings: Mapping[str, float], runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's lines: the raw client ceilings, then the table of every run (:func:`run_lines`)."""
    return ["raw client ceiling (same broker, same run; each figure one Python thread, not the pipeline's 2 cores):",
            "", *(f"- {name}: {rate:,.0f} records/s" for name, rate in ceilings.items()), "",
            *TABLE_HEAD, *(line for run in runs for line in run_lines(run))]


def record_run(record: RunRecord, ceilings: Mapping[str, float], runs: Sequence[Mapping[str, Any]], *,
               records: int, batches: Sequence[int], shapes: Sequence[int], baseline: str | None, cap: float,
               results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header, the ceilings and the table (:func:`render`) and write the record
    (:func:`bench.record.report`, one round) into ``results`` (None: no record) with the ceilings
    and every run's figures (:func:`transport_run`); returns the paths written."""
    figures = {"records": records, "batches": list(batches), "stages": list(shapes), "baseline": baseline,
               "cap": cap, "ceilings": dict(ceilings), "runs": [dict(r) for r in runs]}
    return report(record, f"Channel transport, {records:,} records per run", 1, render(ceilings, runs), figures,
                  results_dir=results)


def main(argv: list[str] | None = None, results: Path | None = RESULTS) -> int:
    """Run the benchmark (module docstring) with the options of ``argv`` (default the command
    line's); the record goes into ``results`` (None: no record). ``--one``: a child's single run,
    its figures on stdout, no record."""
    parser = argparse.ArgumentParser(prog="python -m bench.channel_transport", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=6_000_000,
                        help="records generated per run (the default runs each pipeline past the JVM's warm-up: "
                             "its JIT compiles Spark's code for about the first minute, 30-45 %% of a core)")
    parser.add_argument("--batches", default="20000,100000", help="gen micro-batch sizes, comma separated")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the 'before' channel writer")
    parser.add_argument("--no-baseline", action="store_true", help="only the 'after' runs")
    parser.add_argument("--extra", action="append", default=[], metavar="LABEL=INCLUDE_DIR",
                        help="another tree to run between 'before' and 'after' (its include/ directory)")
    parser.add_argument("--cap", type=float, default=180.0, help="seconds a run may take at most")
    parser.add_argument("--after", default=str(ROOT / "include"), help="the 'after' tree's include/ directory "
                        "(default: this checkout's)")
    parser.add_argument("--stages", default="2", help="pipeline shapes, comma separated: 2 (gen -> totals) and/or "
                        "3 (gen -> mid -> totals)")
    parser.add_argument("--servers", help=argparse.SUPPRESS)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    shapes = [int(n) for n in args.stages.split(",")]
    if not shapes or any(n not in (2, 3) for n in shapes):
        parser.error(f"--stages takes 2 and/or 3, comma separated (got {args.stages!r})")
    if args.one:  # a child: one pipeline run against --servers
        say(RESULT_PREFIX + json.dumps(run_pipeline(args.servers, args.records, batches[0], args.cap, shapes[0])))
        return 0

    from barrierflow.kafka_io.embedded_broker import embedded_broker

    record = RunRecord.start("channel-transport", command_line() if argv is None else " ".join(
        ["python -m bench.channel_transport", *(shlex.quote(a) for a in argv)]))
    print(f"{args.records:,} records per run", file=sys.stderr, flush=True)
    ceilings: dict[str, float] = {}
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bf-chbench-") as tmp, embedded_broker(None, 30.0, 10.0) as servers:
            ceilings.update(client_ceilings(servers, min(args.records, 500_000)))
            for name, rate in ceilings.items():
                print(f"raw client ceiling, {name}: {rate:,.0f} records/s", file=sys.stderr, flush=True)
            variants = [(label, Path(path)) for label, _, path in (e.partition("=") for e in args.extra)]
            variants.append(("after", Path(args.after)))
            if not args.no_baseline:
                variants.insert(0, (f"before ({args.baseline})", baseline_tree(args.baseline, Path(tmp))))
            for shape, batch, (label, include) in ((n, b, v) for n in shapes for b in batches for v in variants):
                runs.append(transport_run(shape, batch, label,
                                          run_variant(include, servers, args.records, batch, args.cap, shape)))
                print("\n".join(run_lines(runs[-1])), file=sys.stderr, flush=True)
    finally:
        if ceilings or runs:  # what finished, also when a later step raised
            record_run(record, ceilings, runs, records=args.records, batches=batches, shapes=shapes,
                       baseline=None if args.no_baseline else args.baseline, cap=args.cap, results=results)
    return 0

if __name__ == "__main__":
    sys.exit(main())
