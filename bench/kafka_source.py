"""Kafka source benchmark: Kafka -> keyed running totals -> discard, beside the
raw client ceiling measured in the same run on the same broker.

Steps, all in one run (ratios are what count on a shared 2-core machine):

1. A broker: the embedded one (Apache Kafka, started here) or ``--bootstrap`` (a real Kafka).
2. ``--records`` JSON records ``{"key", "value", "event_time"}`` (1,000 keys) produced with
   confluent-kafka to a fresh topic of ``--partitions`` partitions: the **produce ceiling**.
3. The topic read back with barrierflow's range reader (confluent-kafka): alone (the **consume
   ceiling**), with ``json.loads`` per record (the **consume+decode ceiling**), and read and
   decoded into Arrow record batches with the Kafka source's own decoder
   (:class:`barrierflow.kafka_io.decoding.RecordDecoder`), per record and vectorized
   (:mod:`barrierflow.kafka_io.json_columns`); and read as columns (offsets, timestamps,
   values per fetch) and decoded vectorized, as the source's tasks do: the **source's decode
   ceiling** (what they could reach with no Spark around them). Each in one Python thread
   (named so), and the consume+decode and source's decode ceilings also in as many processes
   as the pipeline has cores (2, ``local[2]``), each reading its share of the partitions: the
   ceilings the pipelines are compared with.
4. The single-stage pipeline: the Kafka source (``format: json``, ``max_records_per_batch``
   ``--batch`` per partition) -> ``keyed_running_totals`` (update mode) -> ``discard``,
   ``local[2]``, 1 s checkpoints, ``--until-exhausted``; records/s over the whole run and after
   the first micro-batch, counted as :mod:`bench.rates` defines it (the query's start left out).
5. The same pipeline from the built-in generator with the same record count, keys and batch
   size: what the rest of the job costs without Kafka.
6. The same job as a pipeline of two stages (``ingest``: the Kafka source projected to ``key,
   value`` -> channel ``c1`` keyed by ``key`` -> ``totals``: keyed running totals -> discard)
   and of three (``ingest`` -> ``c1`` -> ``mid``: projection -> ``c2`` -> ``totals``), the
   channels on the same broker with ``--partitions`` partitions, aligned 1 s global
   checkpoints, every stage in the one SparkSession (``--stages`` picks which of 1, 2, 3 run).

It prints each figure and the ratios pipeline / consume+decode ceiling in 2 processes and Kafka
pipeline / generator pipeline. Usage (from the repository root; docs/benchmarks.md has a run)::

    PYTHONPATH=include:. .venv/bin/python -m bench.kafka_source [--records 2000000] [--batch 100000]
        [--partitions 4] [--stages 1,2,3] [--bootstrap HOST:PORT] [--markdown FILE]

``python -m bench --scenario kafka`` runs it with its defaults.

The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.rates import StageBatchClock, job_rate, records_through

KEYS = 1000
#: The fields the Kafka source decodes (the pipeline's and the decoder ceilings').
JSON_FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}
PER_RECORD = "consume + decode to Arrow (the source's decoder, per record)"
VECTORIZED = "consume + decode to Arrow (the source's decoder, vectorized)"
COLUMNS = "consume as columns (no decoding)"
SOURCE = "consume as columns + vectorized decode (what the source's tasks do)"


def say(line: str = "") -> None:
    print(line, flush=True)


def _values(count: int) -> list[bytes]:
    return [json.dumps({"key": i % KEYS, "value": i, "event_time": "2026-01-01T00:00:00.001000Z"},
                       separators=(",", ":")).encode() for i in range(count)]


def produce(servers: str, topic: str, records: int, partitions: int) -> float:
    """Create ``topic`` and produce ``records`` records to it; records/s (acks=all, batched)."""
    from barrierflow.kafka_io import KafkaIOError, ProducerSettings, shared_producer
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = shared_producer(ProducerSettings(servers=servers))
    deadline = time.monotonic() + 30
    while True:  # ready: the broker's metadata shows the new topic's partitions
        try:
            producer.partitions(topic)
            break
        except KafkaIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    values = _values(records)
    began = time.monotonic()
    producer.send_all(topic, values, [i % partitions for i in range(records)])
    producer.settle()
    return records / (time.monotonic() - began)


#: The ceilings a pipeline is compared with: also measured with as many processes as the
#: pipeline has cores (:data:`CORES`), since one Python thread is no ceiling for two cores.
PARALLEL = ("consume + json.loads", SOURCE)
#: The pipelines' cores (``local[2]``): the parallel ceilings run this many processes.
CORES = 2


def _read(kind: str, servers: str, topic: str, partitions: list[int], share: int) -> int:
    """Read (and decode, per ``kind``) ``share`` records of each of ``partitions``; the records
    or rows done. One Python thread."""
    from barrierflow.kafka_io.consumer import ConsumerSettings, RangeReader
    from barrierflow.kafka_io.decoding import RecordDecoder
    from barrierflow.spec.models import KafkaSourceSpec

    spec = KafkaSourceSpec.model_validate({"type": "kafka", "bootstrap_servers": servers, "topics": [topic],
                                           "format": "json", "json_fields": JSON_FIELDS})
    reader = RangeReader(ConsumerSettings(servers=servers))
    count = 0
    try:
        for partition in partitions:
            if kind == "consume only (no decoding)":
                count += sum(1 for _ in reader.read(topic, partition, 0, share, stall=30.0))
            elif kind == COLUMNS:
                count += sum(len(c.offsets) for c in reader.read_columns(topic, partition, 0, share, stall=30.0))
            elif kind == "consume + json.loads":
                for record in reader.read(topic, partition, 0, share, stall=30.0):
                    json.loads(record.value)
                    count += 1
            elif kind in (PER_RECORD, VECTORIZED):
                decoder = RecordDecoder(spec, vectorized=kind == VECTORIZED)
                count += sum(b.num_rows for b in decoder.batches(reader.read(topic, partition, 0, share, stall=30.0)))
            elif kind == SOURCE:
                chunks = reader.read_columns(topic, partition, 0, share, stall=30.0)
                count += sum(b.num_rows for b in RecordDecoder(spec).column_batches(topic, partition, chunks))
            else:
                raise ValueError(f"unknown ceiling {kind!r}")
    finally:
        reader.close()
    return count


def _read_worker(kind: str, servers: str, topic: str, partitions: list[int], share: int, start: Any,
                 out: Any) -> None:
    """One process of a parallel ceiling: waits at ``start`` (every process ready), then reads;
    puts ``(records, began, ended)`` (monotonic seconds, one clock for the whole machine) on ``out``."""
    start.wait()
    began = time.monotonic()
    count = _read(kind, servers, topic, partitions, share)
    out.put((count, began, time.monotonic()))


def parallel_ceiling(kind: str, servers: str, topic: str, records: int, partitions: int, processes: int) -> float:
    """Records/s of ceiling ``kind`` read by ``processes`` processes at once, partition ``p`` by
    process ``p % processes``: all records over the time from the first process's start to the
    last one's end (the processes start together, after their imports)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(processes), context.Queue()
    share = records // partitions
    workers = [context.Process(target=_read_worker, args=(kind, servers, topic, list(range(i, partitions, processes)),
                                                          share, start, out)) for i in range(processes)]
    for w in workers:
        w.start()
    try:
        done = [out.get(timeout=600) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=60)
    count = sum(d[0] for d in done)
    return count / (max(d[2] for d in done) - min(d[1] for d in done))


def read_ceilings(servers: str, topic: str, records: int, partitions: int) -> dict[str, float]:
    """Records/s read with the range reader alone, decoded by ``json.loads``, and read and decoded
    into Arrow record batches by the Kafka source's decoder: each in one Python thread, and
    those of :data:`PARALLEL` also in :data:`CORES` processes (the pipeline's cores)."""
    out: dict[str, float] = {}
    share = records // partitions
    for kind in ("consume only (no decoding)", COLUMNS, "consume + json.loads", PER_RECORD, VECTORIZED, SOURCE):
        began = time.monotonic()
        count = _read(kind, servers, topic, list(range(partitions)), share)
        out[one_thread(kind)] = count / (time.monotonic() - began)
    for kind in PARALLEL:
        out[in_processes(kind)] = parallel_ceiling(kind, servers, topic, records, partitions, CORES)
    return out


def one_thread(kind: str) -> str:
    return f"{kind}, one Python thread"


def in_processes(kind: str) -> str:
    return f"{kind}, {CORES} processes (the pipeline's {CORES} cores)"


def pipeline_spec(work: Path, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1, "name": f"kbench-{uuid.uuid4().hex[:8]}", "work_dir": str(work / "work"),
        "sources": [source],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                           "output_mode": "update"},
        "sinks": [{"name": "out", "type": "discard"}],
        "trigger": {"interval": 0.1},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": 1.0, "timeout": 120.0,
                       "tolerable_failed_checkpoints": 1000},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }


def run_pipeline(spark: Any, source: dict[str, Any], cap: float) -> dict[str, Any]:
    """One bounded run of the pipeline over ``source`` in the shared SparkSession."""
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import parse_spec

    work = Path(tempfile.mkdtemp(prefix="bf-kbench-"))
    try:
        job = StreamingJob(parse_spec(pipeline_spec(work, source)), spark=spark)
        began = time.monotonic()
        result = job.run(until_exhausted=True, duration=cap)
        seconds = time.monotonic() - began
        outcome = "ok" if seconds < cap else f"not done within {cap:g}s"
        steady = job_rate(result)
        return {"outcome": outcome, "records": result.records, "seconds": seconds,
                "rate": result.records / seconds if seconds else 0.0, "steady": steady,
                "batches": result.batches, "checkpoints": len(result.completed)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def staged_spec(work: Path, servers: str, topic: str, *, stages: int, batch: int, partitions: int
                ) -> dict[str, Any]:
    """The job as a pipeline of ``stages`` (2 or 3) stages (module docstring, step 6)."""
    suffix = uuid.uuid4().hex[:8]
    names = [f"c{n}" for n in range(1, stages)]
    fields = {"key": "long", "value": "long"}
    projection = {"function": "barrierflow.transforms.projection:project",
                  "options": {"columns": {"key": "key", "value": "value"}}}

    def channel_source(name: str) -> dict[str, Any]:
        return {"type": "channel", "channel": name, "max_records_per_batch": batch, "json_fields": fields}

    chain: list[dict[str, Any]] = [
        {"name": "ingest",
         "sources": [{"name": "events", "type": "kafka", "bootstrap_servers": servers, "topics": [topic],
                      "format": "json", "max_records_per_batch": batch, "json_fields": JSON_FIELDS}],
         "transformation": projection, "sinks": [{"type": "channel", "channel": names[0], "key_column": "key"}]}]
    for before, after in itertools.pairwise(names):
        chain.append({"name": "mid", "sources": [channel_source(before)], "transformation": projection,
                      "sinks": [{"type": "channel", "channel": after, "key_column": "key"}]})
    chain.append({"name": "totals", "sources": [channel_source(names[-1])],
                  "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                     "output_mode": "update"},
                  "sinks": [{"name": "out", "type": "discard"}]})
    return {
        "version": 1, "name": f"kbench{stages}-{suffix}", "work_dir": str(work / "work"),
        "channels": [{"name": n, "topic": f"kbench-{n}-{suffix}", "partitions": partitions, "bootstrap": servers}
                     for n in names],
        "stages": chain,
        "trigger": {"interval": 0.1},
        "checkpoint": {"storage": f"file://{work / 'checkpoints'}", "interval": 1.0, "timeout": 120.0,
                       "mode": "aligned", "tolerable_failed_checkpoints": 1000},
        "spark": {"master": "local[2]", "shuffle_partitions": 2},
    }


def run_staged(spark: Any, servers: str, topic: str, *, stages: int, records: int, batch: int, partitions: int,
               cap: float) -> dict[str, Any]:
    """One bounded run of the job as ``stages`` stages in the shared SparkSession: until a
    global checkpoint covers every record of the topic, ``cap`` seconds, or a failure (the
    failure is the figure then)."""
    from barrierflow.runtime.pipeline import StagedPipelineJob
    from barrierflow.spec import parse_staged_spec

    work = Path(tempfile.mkdtemp(prefix="bf-kbench-"))
    clock = StageBatchClock("ingest", "totals")
    try:
        job = StagedPipelineJob(parse_staged_spec(staged_spec(work, servers, topic, stages=stages, batch=batch,
                                                              partitions=partitions)), spark=spark)
        began = time.monotonic()
        try:
            result = job.run(until_exhausted=True, duration=cap, progress=clock, progress_every=0.2)
            seconds = time.monotonic() - began
            outcome = "ok" if seconds < cap else f"not done within {cap:g}s"
            checkpoints = len(result.completed)
        except Exception as exc:  # the figure to report is the failure itself
            seconds, outcome, checkpoints = time.monotonic() - began, f"FAILED: {type(exc).__name__}", 0
        steady = float("nan")
        if outcome == "ok" and clock.first_batch is not None:
            first = records_through(job.stage_job("ingest").layout.spark_checkpoint, clock.first_batch[0])
            steady = clock.rate(first, records)
        done = records if outcome == "ok" else 0
        return {"outcome": outcome, "records": done, "seconds": seconds, "rate": done / seconds if seconds else 0.0,
                "steady": steady, "batches": "-", "checkpoints": checkpoints}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ratio(a: float, b: float) -> str:
    """``a / b`` to two places; "n/a" when either is unknown (a run of one micro-batch has no
    rate after its first batch) or ``b`` is 0."""
    return f"{a / b:.2f}" if a == a and b == b and b else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records in the topic (and generated)")
    parser.add_argument("--batch", type=int, default=100_000, help="max records per partition and micro-batch")
    parser.add_argument("--partitions", type=int, default=4, help="the topic's partitions")
    parser.add_argument("--bootstrap", help="a Kafka cluster's host:port list (default: the embedded broker)")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds a pipeline run may take at most")
    parser.add_argument("--stages", default="1,2,3", help="pipeline shapes to run: 1 (with the generator run), "
                                                           "2 and/or 3 stages, comma separated")
    parser.add_argument("--markdown", help="append the results as a markdown table to this file")
    args = parser.parse_args(argv)
    if args.records < args.partitions or args.batch < 1 or args.cap <= 0:
        parser.error("--records must be at least --partitions, --batch and --cap positive")
    try:
        shapes = sorted({int(n) for n in args.stages.split(",") if n.strip()})
    except ValueError:
        shapes = []
    if not shapes or not set(shapes) <= {1, 2, 3}:
        parser.error(f"--stages takes 1, 2 and/or 3, comma separated (got {args.stages!r})")
    records = args.records - args.records % args.partitions

    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.session import build_session
    from barrierflow.spec.models import SparkSpec

    started, load = datetime.now(UTC), os.getloadavg()[0]
    say(f"Kafka source benchmark, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
        f"{load:.1f}; {records:,} records, {args.partitions} partitions, {args.batch:,} per "
        "partition and batch")
    lines: list[str] = []
    with ExitStack() as stack:
        servers = args.bootstrap or stack.enter_context(embedded_broker(None, 30.0, 10.0))
        topic = f"kbench-{uuid.uuid4().hex[:8]}"
        ceilings = {"produce (confluent-kafka, acks=all)": produce(servers, topic, records, args.partitions)}
        ceilings.update(read_ceilings(servers, topic, records, args.partitions))
        spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                              app_name="barrierflow-kafka-bench")
        runs: dict[str, dict[str, Any]] = {}
        if 1 in shapes:
            runs["Kafka"] = run_pipeline(spark, {"name": "events", "type": "kafka", "bootstrap_servers": servers,
                                                 "topics": [topic], "format": "json",
                                                 "max_records_per_batch": args.batch, "json_fields": JSON_FIELDS},
                                         args.cap)
            runs["generator"] = run_pipeline(
                spark, {"name": "events", "type": "generator", "partitions": args.partitions, "rows_per_second": 0,
                        "keys": KEYS, "max_records_per_batch": args.batch,
                        "records_per_partition": records // args.partitions}, args.cap)
        for stages in (n for n in shapes if n > 1):
            runs[f"{stages} stages"] = run_staged(spark, servers, topic, stages=stages, records=records,
                                                  batch=args.batch, partitions=args.partitions, cap=args.cap)
        spark.stop()
    decode = ceilings[in_processes("consume + json.loads")]
    lines.append("| figure | records/s |")
    lines.append("|---|---:|")
    for name, rate in ceilings.items():
        lines.append(f"| ceiling: {name} | {rate:,.0f} |")
    for label, r in runs.items():
        source = f"pipeline from the {label} source" if label in ("Kafka", "generator") else \
            f"Kafka pipeline of {label}"
        lines.append(f"| {source} ({r['outcome']}, {r['batches']} batches, {r['checkpoints']} checkpoints): "
                     f"whole run / after the first batch | {r['rate']:,.0f} / {r['steady']:,.0f} |")
    for label, r in runs.items():
        if label != "generator":
            lines.append(f"| ratio: {label if label != 'Kafka' else '1 stage'} after the first batch / "
                         f"{in_processes('consume + json.loads')} | {_ratio(r['steady'], decode)} |")
    lines.append(f"| ratio: the source's decoder, vectorized / per record (one Python thread each) "
                 f"| {_ratio(ceilings[one_thread(VECTORIZED)], ceilings[one_thread(PER_RECORD)])} |")
    if "Kafka" in runs:
        lines.append(f"| ratio: Kafka pipeline after the first batch / what the source's tasks do, "
                     f"{CORES} processes | {_ratio(runs['Kafka']['steady'], ceilings[in_processes(SOURCE)])} |")
        lines.append(f"| ratio: Kafka pipeline / generator pipeline, after the first batch "
                     f"| {_ratio(runs['Kafka']['steady'], runs['generator']['steady'])} |")
    say()
    for line in lines:
        say(line)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write(f"\n`python -m bench.kafka_source --records {args.records} --batch {args.batch} --partitions "
                      f"{args.partitions} --stages {args.stages}`, {started:%Y-%m-%d %H:%M} UTC, "
                      f"load average (1 min) at the start {load:.1f}, at the end {os.getloadavg()[0]:.1f}:\n\n"
                      + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
