"""Kafka source benchmark: Kafka -> keyed running totals -> discard, beside the
raw client ceiling measured in the same run on the same broker.

Steps, all in one run (ratios are what count on a shared 2-core machine):

1. A broker: the embedded one (Apache Kafka, started here) or ``--bootstrap`` (a real Kafka).
2. ``--records`` JSON records ``{"key", "value", "event_time"}`` (1,000 keys; ``--text
   realistic``: with names, URLs and comments besides, about 30 % of them with non-ASCII text,
   :mod:`bench.json_records`) produced with confluent-kafka to a fresh topic of
   ``--partitions`` partitions: the **produce ceiling**.
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
7. **Side by side** on the same broker and topic, the same job (JSON records decoded, keyed
   running count and sum, update mode, a discarding sink, 1 s checkpoints), ``--side-by-side``
   picks which run:

   a. ``python``: barrierflow with its Python reader (the pipeline of step 4, the same run);
   b. ``spark``: barrierflow with Spark's connector (``reader: spark``), otherwise the same spec;
   c. ``plain``: plain Spark Structured Streaming, no barrierflow: ``readStream.format("kafka")``
      (``maxOffsetsPerTrigger`` = ``--batch`` x partitions, as ``reader: spark`` sets it) ->
      ``from_json`` (decoded as ``reader: spark`` decodes: one parse per record, the timestamp
      field read as text and converted where used; the consumer's settings as ``reader: spark``
      sets them, :data:`barrierflow.sources.spark_kafka.CONSUMER_SETTINGS`: the Java client's
      500 ms fetch wait stalls the batch that reaches the topic's end and its 500 records per
      poll make the connector ask for the partition's offsets every 500 records, tunings a Spark
      user makes) -> ``groupBy(key).agg(count, sum)`` ->
      update mode -> the ``noop`` sink,
      the pipelines' trigger (:data:`TRIGGER`), its own ``checkpointLocation`` (Spark writes its
      offset and commit logs and state every batch: its "checkpoint" is per batch), in the
      same SparkSession (so with the same Spark settings) as a and b;
   c'. ``plain-decoder``: c with its records decoded by barrierflow's JSON decoder
      (:mod:`barrierflow.sources.flat_json`), as b decodes them, instead of ``from_json``: b / c'
      is what barrierflow costs beside the decoder, b / c what a user gains or loses against
      plain Spark as it is written;
   d. ``flink``: Flink SQL (the Flink virtual environment's apache-flink, ``make flink``) with
      Flink's Kafka connector (the ``flink-kafka`` JVM artifact set, ``make install``) and
      checkpoints every 1 s, untuned and tuned (mini-batch, two-phase:
      :data:`bench.flink_sql_job.TUNED`), ``bench/flink_sql_job.py --kafka``, each run a JVM of
      its own while the Spark session idles.

   b, c, c' and d run in rounds (:func:`connector_rounds`): a warm-up round of b, c and c'
   (each once, figures dropped), then ``--rounds`` rounds back to back, the order reversed
   every other round; each one's figure is its median, and the ratios b / c and b / d tuned of
   each round are printed too. Beside them,
   the share of records barrierflow's JSON decoder (b, c') leaves to ``from_json``, counted on
   the topic's first 100,000 records (:func:`bench.json_records.fallback_rate`).

   All counted "after the first batch" as :mod:`bench.rates` defines it (plain Spark from its
   query progress, :func:`progress_rate`; Flink with a short run in the first batch's place,
   :func:`bench.flink_compare.flink_rate`), printed with the ratios b / c, b / d tuned, b / d
   untuned and a / b (:func:`side_by_side_lines`). ``--systems`` runs the side by side alone
   (the produce step, then no ceilings, generator or stage runs).

It prints each figure and the ratios pipeline / consume+decode ceiling in 2 processes and Kafka
pipeline / generator pipeline, then the side by side. Usage (from the repository root;
bench/results/ has its runs)::

    PYTHONPATH=include:. .venv/bin/python -m bench.kafka_source [--records 8000000] [--batch 100000]
        [--partitions 4] [--stages 1,2,3] [--side-by-side python,spark,plain,plain-decoder,flink]
        [--rounds 3] [--systems] [--text plain|realistic] [--bootstrap HOST:PORT] [--markdown FILE]

``python -m bench --scenario kafka`` runs it with its defaults.

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every figure and every round of the
side by side (:mod:`bench.record`), to bench/results/kafka-source/ (kafka-side-by-side/ with
``--systems``); ``--markdown FILE`` appends the table to ``FILE`` besides.

The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import json_records
from bench.rates import BatchEnd, StageBatchClock, job_rate, rate_after_first_batch, records_through
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report
from bench.spread import median

KEYS = 1000
#: The fields the Kafka source decodes (the pipeline's and the decoder ceilings').
JSON_FIELDS = {"key": "long", "value": "long", "event_time": "timestamp"}
PER_RECORD = "consume + decode to Arrow (the source's decoder, per record)"
VECTORIZED = "consume + decode to Arrow (the source's decoder, vectorized)"
COLUMNS = "consume as columns (no decoding)"
SOURCE = "consume as columns + vectorized decode (what the source's tasks do)"
#: The pipelines' trigger interval (seconds); plain Spark's ``processingTime`` matches it.
TRIGGER = 0.1
#: Where each run's record goes: a whole run's, a ``--systems`` run's.
RESULTS, RESULTS_SYSTEMS = RESULTS_ROOT / "kafka-source", RESULTS_ROOT / "kafka-side-by-side"
#: The systems of the side by side (module docstring, step 7), in the order they run.
SYSTEMS = ("python", "spark", "plain", "plain-decoder", "flink")
#: The records the decoder's fallback rate is counted on (the topic's first, the same generator).
FALLBACK_SAMPLE = 100_000
#: Flink's Kafka connector: the JVM artifact set (include/barrierflow/jvm/artifacts.lock).
FLINK_JVM_SET = "flink-kafka"
#: The side by side's rows: key in :func:`side_by_side_lines`' ``rates`` -> what was measured.
SIDE_BY_SIDE = {
    "python": "a. barrierflow, its Python reader (reader: python), ABS checkpoints every 1 s",
    "spark": "b. barrierflow, Spark's connector (reader: spark), ABS checkpoints every 1 s",
    "plain": "c. plain Spark Structured Streaming, Spark's connector, its own checkpoint (every batch)",
    "plain-decoder": "c'. c with its records decoded by barrierflow's JSON decoder instead of from_json",
    "flink tuned": "d. Flink SQL, Flink's Kafka connector, checkpoints every 1 s, tuned (mini-batch, two-phase)",
    "flink untuned": "d. Flink SQL, Flink's Kafka connector, checkpoints every 1 s, untuned (Flink's defaults)",
}


def say(line: str = "") -> None:
    print(line, flush=True)


def produce(servers: str, topic: str, records: int, partitions: int, text: str = "plain") -> float:
    """Create ``topic`` and produce ``records`` records of kind ``text`` (:mod:`bench.json_records`)
    to it; records/s (acks=all, batched)."""
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
    values = json_records.values(records, KEYS, text)
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
        "trigger": {"interval": TRIGGER},
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


def kafka_source(servers: str, topic: str, batch: int, reader: str = "python") -> dict[str, Any]:
    """The Kafka source of the single-stage pipeline, read by ``reader`` (``python`` or ``spark``)."""
    return {"name": "events", "type": "kafka", "reader": reader, "bootstrap_servers": servers, "topics": [topic],
            "format": "json", "max_records_per_batch": batch, "json_fields": JSON_FIELDS}


def progress_rate(progress: Sequence[Mapping[str, Any]]) -> float:
    """Records/s after the first batch (:mod:`bench.rates`) of a plain Spark query, from its
    progress reports (``StreamingQueryProgress``, each once, in any order): a batch ends at its
    ``timestamp`` (when its trigger started) plus its ``durationMs.triggerExecution`` (the
    whole batch, the commit log written); the first batch is the lowest ``batchId`` that read
    records, the last the highest, and the records are the sum of ``numInputRows`` up to each.
    Batches that read nothing are left out (they move no record). NaN with fewer than two such
    batches."""
    batches = sorted((p for p in progress if int(p["numInputRows"]) > 0), key=lambda p: int(p["batchId"]))
    if len(batches) < 2:
        return math.nan

    def end(report: Mapping[str, Any]) -> float:
        started = datetime.fromisoformat(str(report["timestamp"]).replace("Z", "+00:00"))
        return started.timestamp() + int(report["durationMs"]["triggerExecution"]) / 1000.0

    first, total = batches[0], sum(int(p["numInputRows"]) for p in batches)
    return rate_after_first_batch(BatchEnd(end(first), int(first["numInputRows"])), BatchEnd(end(batches[-1]), total))


def run_plain_spark(spark: Any, servers: str, topic: str, *, records: int, batch: int, partitions: int,
                    cap: float, decoder: str = "from_json") -> dict[str, Any]:
    """One bounded run of the job on plain Spark Structured Streaming (module docstring, step 7c)
    in the shared SparkSession, until its batches read ``records`` records or ``cap`` seconds;
    ``decoder`` ``from_json`` (c) or ``barrierflow`` (c': barrierflow's JSON decoder, as b decodes)."""
    from barrierflow.sources.flat_json import decoded_record
    from barrierflow.sources.spark_kafka import CONSUMER_SETTINGS
    from pyspark.sql import functions as F

    work = Path(tempfile.mkdtemp(prefix="bf-kbench-plain-"))
    # one parse per record, a timestamp field read as text and converted only where used, as
    # ``reader: spark`` does it
    types = {"timestamp": "string", "long": "bigint"}
    schema = ", ".join(f"`{name}` {types.get(kind, kind)}" for name, kind in JSON_FIELDS.items())
    parsed = {name: types.get(kind, kind).upper() for name, kind in JSON_FIELDS.items()}
    record = F.from_json(F.col("value").cast("string"), schema) if decoder == "from_json" else \
        decoded_record(spark, F.col("value"), parsed)
    fields = [F.coalesce(F.try_to_timestamp(F.col(f"r.{name}")),
                         F.timestamp_millis(F.col(f"r.{name}").try_cast("bigint"))).alias(name)
              if kind == "timestamp" else F.col(f"r.{name}").alias(name) for name, kind in JSON_FIELDS.items()]
    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(batch * partitions))
             .option("failOnDataLoss", "true").option("kafka.isolation.level", "read_committed")
             .options(**{f"kafka.{name}": value for name, value in CONSUMER_SETTINGS.items()}).load()
             .select(record.alias("r")).select(*fields)
             .groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum")))
    seen: dict[int, Mapping[str, Any]] = {}
    began = time.monotonic()
    query = (frame.writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime=f"{int(TRIGGER * 1000)} milliseconds").start())
    try:
        while time.monotonic() - began < cap:
            seen.update({int(p["batchId"]): p for p in query.recentProgress})
            if sum(int(p["numInputRows"]) for p in seen.values()) >= records or not query.isActive:
                break
            query.awaitTermination(0.2)
        seen.update({int(p["batchId"]): p for p in query.recentProgress})
        failure = query.exception()
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - began
    done = sum(int(p["numInputRows"]) for p in seen.values())
    outcome = "ok" if done >= records else f"{done:,} of {records:,} records in {cap:g}s"
    if failure is not None:  # the figure to report is the failure itself
        say(f"plain Spark failed: {failure}")
        outcome = f"FAILED: {type(failure).__name__}"
    return {"outcome": outcome, "records": done, "seconds": seconds, "rate": done / seconds if seconds else 0.0,
            "steady": progress_rate(list(seen.values())), "batches": sum(1 for p in seen.values()
                                                                          if int(p["numInputRows"]) > 0),
            "checkpoints": "-"}


def connector_rounds(run: Callable[[str], dict[str, Any]], systems: Sequence[str], rounds: int,
                     warm_up: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """The side by side's systems, each run by ``run``: a warm-up round first (each system of
    ``warm_up``, default all, once, figures dropped: the shared Spark JVM compiles the
    connector's and the job's code on its first runs, and whichever system ran first would pay
    for it; a Flink run starts a JVM of its own and needs none), then ``rounds`` rounds, the
    order reversed every other round so no system always runs first. Each system's result is
    its last round's, with ``rounds`` (its records/s after the first batch in each round) and
    ``steady`` their median."""
    out: dict[str, dict[str, Any]] = {}
    for system in (systems if warm_up is None else [s for s in systems if s in warm_up]):
        run(system)
    measured: dict[str, list[float]] = {system: [] for system in systems}
    for number in range(rounds):
        for system in (systems if number % 2 == 0 else list(reversed(systems))):
            out[system] = run(system)
            measured[system].append(float(out[system]["steady"]))
    for system, rates in measured.items():
        out[system] = {**out[system], "rounds": rates, "steady": median(rates)}
    return out


def flink_jars() -> list[str]:
    """The jars of Flink's Kafka connector (:data:`FLINK_JVM_SET`), verified against the lock.

    Raises:
        JvmArtifactError: not installed (naming ``make install``).
    """
    from barrierflow.jvm.classpath import set_jars

    return [str(jar) for jar in set_jars(FLINK_JVM_SET, verify=True)]


def run_flink(python: Path, jars: list[str], servers: str, topic: str, *, records: int, partitions: int,
              tuned: bool) -> dict[str, Any]:
    """One Kafka-mode run of the Flink SQL job with 1 s checkpoints (module docstring, step 7d);
    a failure is the figure (its outcome), not an exception."""
    from bench.flink_compare import flink_rate, kafka_job_command, run_flink_script

    command = kafka_job_command(python, bootstrap=servers, topic=topic, partitions=partitions, records=records,
                                interval=1.0, tuned=tuned, jars=jars)
    try:
        result = run_flink_script(command)
    except Exception as exc:  # the figure to report is the failure itself
        say(f"Flink SQL {'tuned' if tuned else 'untuned'} failed: {exc}")
        return {"outcome": f"FAILED: {type(exc).__name__}", "steady": math.nan, "version": "?"}
    return {"outcome": (f"ok, {int(result['rows']):,} records in {float(result['seconds']):.1f} s, the short run's "
                        f"{int(result['first_rows']):,} in {float(result['first_seconds']):.1f} s"),
            "steady": flink_rate(result), "version": str(result.get("flink_version", "?"))}


def side_by_side_lines(rates: Mapping[str, float], notes: Mapping[str, str] | None = None) -> list[str]:
    """The side by side as Markdown table lines: one row per system measured (keys of
    :data:`SIDE_BY_SIDE` in ``rates``: records/s after the first batch; ``notes`` adds a
    parenthesis to a row), then the ratios b / c (aim >= 0.9), b / d tuned (aim >= 0.8), b / d
    untuned and a / b, each "n/a" when a side is missing or unknown."""
    notes = notes or {}
    lines = ["| system (one broker, one topic, one run) | records/s after the first batch |", "|---|---:|"]
    for key, label in SIDE_BY_SIDE.items():
        if key in rates:
            note = f" ({notes[key]})" if notes.get(key) else ""
            lines.append(f"| {label}{note} | {rates[key]:,.0f} |")
    nan = math.nan
    for label, a, b in (
            ("b / c: barrierflow with Spark's connector / plain Spark (aim >= 0.9)", "spark", "plain"),
            ("b / d tuned: barrierflow with Spark's connector / Flink SQL tuned (aim >= 0.8)", "spark", "flink tuned"),
            ("b / d untuned: barrierflow with Spark's connector / Flink SQL untuned", "spark", "flink untuned"),
            ("a / b: barrierflow's Python reader / Spark's connector", "python", "spark"),
            ("b / c': barrierflow with Spark's connector / plain Spark decoding as b does (what barrierflow "
             "costs beside the decoder)", "spark", "plain-decoder")):
        lines.append(f"| ratio {label} | {_ratio(rates.get(a, nan), rates.get(b, nan))} |")
    return lines


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
        "trigger": {"interval": TRIGGER},
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


#: Records in the topic by default: about 20 micro-batches of 400,000 per system. With 2,000,000
#: (4-5 batches after the first) the ratio b / c of one round ranged 0.81-1.13 between rounds
#: of one run: a few seconds of measured time decided it.
RECORDS = 8_000_000


def _ratio(a: float, b: float) -> str:
    """``a / b`` to two places; "n/a" when either is unknown (a run of one micro-batch has no
    rate after its first batch) or ``b`` is 0."""
    return f"{a / b:.2f}" if a == a and b == b and b else "n/a"


def main(argv: list[str] | None = None, command: str | None = None) -> int:
    """Run the benchmark (module docstring) with the options of ``argv`` (default the command
    line's); ``command``: the command line the record names (default ``argv`` as
    ``python -m bench.kafka_source``'s)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS, help="records in the topic (and generated)")
    parser.add_argument("--batch", type=int, default=100_000, help="max records per partition and micro-batch")
    parser.add_argument("--partitions", type=int, default=4, help="the topic's partitions")
    parser.add_argument("--bootstrap", help="a Kafka cluster's host:port list (default: the embedded broker)")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds a pipeline run may take at most")
    parser.add_argument("--stages", default="1,2,3", help="pipeline shapes to run: 1 (with the generator run), "
                                                           "2 and/or 3 stages, comma separated")
    parser.add_argument("--side-by-side", default=",".join(SYSTEMS),
                        help="the systems side by side on the same topic (step 7): python, spark, plain and/or "
                             "flink, comma separated, or none")
    parser.add_argument("--systems", action="store_true",
                        help="only the side by side: no read ceilings, generator or stage runs")
    parser.add_argument("--rounds", type=int, default=3,
                        help="measured rounds of the Spark connector systems (spark, plain), after a warm-up round")
    parser.add_argument("--text", choices=json_records.TEXTS, default="plain",
                        help="the records: plain (key, value, event_time; ASCII) or realistic (besides, names, URLs, "
                             "comments; about 30 %% with non-ASCII text)")
    parser.add_argument("--markdown", help="append the results as a markdown table to this file")
    args = parser.parse_args(argv)
    if args.records < args.partitions or args.batch < 1 or args.cap <= 0 or args.rounds < 1:
        parser.error("--records must be at least --partitions, --batch, --cap and --rounds positive")
    try:
        shapes = sorted({int(n) for n in args.stages.split(",") if n.strip()})
    except ValueError:
        shapes = []
    if not shapes or not set(shapes) <= {1, 2, 3}:
        parser.error(f"--stages takes 1, 2 and/or 3, comma separated (got {args.stages!r})")
    systems = [] if args.side_by_side.strip() == "none" else \
        [s.strip() for s in args.side_by_side.split(",") if s.strip()]
    if not set(systems) <= set(SYSTEMS) or (args.systems and not systems):
        parser.error(f"--side-by-side takes {', '.join(SYSTEMS)} (comma separated) or none, and --systems needs at "
                     f"least one (got {args.side_by_side!r})")
    if args.systems:
        shapes = []
    records = args.records - args.records % args.partitions

    from barrierflow.errors import BarrierflowError
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.session import build_session, source_jars
    from barrierflow.spec.models import SparkSpec

    from bench.flink_compare import flink_python

    spark_sets = ["spark-kafka"] if {"spark", "plain", "plain-decoder"} & set(systems) else []
    try:  # what the systems need is installed: said before anything runs
        source_jars([], spark_sets)
        flink = (flink_python(), flink_jars()) if "flink" in systems else None
    except BarrierflowError as exc:
        parser.error(f"{exc} (or leave that system out with --side-by-side)")
    if command is None:
        command = command_line() if argv is None else " ".join(["python -m bench.kafka_source",
                                                                 *(shlex.quote(a) for a in argv)])
    record = RunRecord.start("kafka", command)
    started, load = record.started, record.load_start
    say(f"Kafka source benchmark, {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
        f"{load:.1f}; {records:,} {args.text} records, {args.partitions} partitions, {args.batch:,} per "
        "partition and batch")
    lines: list[str] = []
    side: dict[str, dict[str, Any]] = {}
    round_ratios: list[str] = []
    flink_ratios: list[str] = []
    fallback: float | None = None
    with ExitStack() as stack:
        servers = args.bootstrap or stack.enter_context(embedded_broker(None, 30.0, 10.0))
        topic = f"kbench-{uuid.uuid4().hex[:8]}"
        ceilings = {"produce (confluent-kafka, acks=all)": produce(servers, topic, records, args.partitions,
                                                                       args.text)}
        if not args.systems:
            ceilings.update(read_ceilings(servers, topic, records, args.partitions))
        runs: dict[str, dict[str, Any]] = {}
        spark = None
        if shapes or {"python", "spark", "plain", "plain-decoder"} & set(systems):
            spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                                  app_name="barrierflow-kafka-bench", jvm_sets=spark_sets)
        if 1 in shapes or "python" in systems:
            runs["Kafka"] = run_pipeline(spark, kafka_source(servers, topic, args.batch), args.cap)
            if "python" in systems:
                side["python"] = runs["Kafka"]
        if 1 in shapes:
            runs["generator"] = run_pipeline(
                spark, {"name": "events", "type": "generator", "partitions": args.partitions, "rows_per_second": 0,
                        "keys": KEYS, "max_records_per_batch": args.batch,
                        "records_per_partition": records // args.partitions}, args.cap)
        connector = [s for s in ("spark", "plain", "plain-decoder") if s in systems]
        flinks = ["flink tuned", "flink untuned"] if flink is not None else []
        if connector or flinks:

            def run_connector(system: str) -> dict[str, Any]:
                if flink is not None and system in flinks:
                    return run_flink(flink[0], flink[1], servers, topic, records=records, partitions=args.partitions,
                                     tuned=system == "flink tuned")
                if system in ("plain", "plain-decoder"):
                    return run_plain_spark(spark, servers, topic, records=records, batch=args.batch,
                                           partitions=args.partitions, cap=args.cap,
                                           decoder="from_json" if system == "plain" else "barrierflow")
                try:
                    return run_pipeline(spark, kafka_source(servers, topic, args.batch, reader="spark"), args.cap)
                except Exception as exc:  # the figure to report is the failure itself
                    say(f"barrierflow with Spark's connector failed: {exc}")
                    return {"outcome": f"FAILED: {type(exc).__name__}", "steady": math.nan, "batches": "-",
                            "checkpoints": "-"}

            side.update(connector_rounds(run_connector, [*connector, *flinks], args.rounds, warm_up=connector))
            if {"spark", "plain-decoder"} & set(connector):
                sample = min(records, FALLBACK_SAMPLE)
                fallback = json_records.fallback_rate(spark, json_records.values(sample, KEYS, args.text),
                                                      {"key": "BIGINT", "value": "BIGINT", "event_time": "STRING"})
            round_ratios = [_ratio(b, c) for b, c in zip(side.get("spark", {}).get("rounds", []),
                                                          side.get("plain", {}).get("rounds", []), strict=False)]
            flink_ratios = [_ratio(b, d) for b, d in zip(side.get("spark", {}).get("rounds", []),
                                                         side.get("flink tuned", {}).get("rounds", []), strict=False)]
        for stages in (n for n in shapes if n > 1):
            runs[f"{stages} stages"] = run_staged(spark, servers, topic, stages=stages, records=records,
                                                  batch=args.batch, partitions=args.partitions, cap=args.cap)
        if spark is not None:
            spark.stop()
    lines.append("| figure | records/s |")
    lines.append("|---|---:|")
    for name, rate in ceilings.items():
        lines.append(f"| ceiling: {name} | {rate:,.0f} |")
    for label, r in runs.items():
        if args.systems:
            break
        source = f"pipeline from the {label} source" if label in ("Kafka", "generator") else \
            f"Kafka pipeline of {label}"
        lines.append(f"| {source} ({r['outcome']}, {r['batches']} batches, {r['checkpoints']} checkpoints): "
                     f"whole run / after the first batch | {r['rate']:,.0f} / {r['steady']:,.0f} |")
    if not args.systems:
        decode = ceilings[in_processes("consume + json.loads")]
        for label, r in runs.items():
            if label != "generator":
                lines.append(f"| ratio: {label if label != 'Kafka' else '1 stage'} after the first batch / "
                             f"{in_processes('consume + json.loads')} | {_ratio(r['steady'], decode)} |")
        lines.append(f"| ratio: the source's decoder, vectorized / per record (one Python thread each) "
                     f"| {_ratio(ceilings[one_thread(VECTORIZED)], ceilings[one_thread(PER_RECORD)])} |")
    if "Kafka" in runs and "generator" in runs:
        lines.append(f"| ratio: Kafka pipeline after the first batch / what the source's tasks do, "
                     f"{CORES} processes | {_ratio(runs['Kafka']['steady'], ceilings[in_processes(SOURCE)])} |")
        lines.append(f"| ratio: Kafka pipeline / generator pipeline, after the first batch "
                     f"| {_ratio(runs['Kafka']['steady'], runs['generator']['steady'])} |")
    if side:
        notes = {key: (f"Flink {r['version']}, {r['outcome']}" if key.startswith("flink") else
                       f"{r['outcome']}, {r['batches']} batches, {r['checkpoints']} checkpoints")
                 for key, r in side.items()}
        for key, r in side.items():
            if r.get("rounds"):
                notes[key] += f", rounds {', '.join(f'{x:,.0f}' for x in r['rounds'])}, the median reported"
        lines += ["", *side_by_side_lines({key: r["steady"] for key, r in side.items()}, notes)]
        if round_ratios:
            lines.append(f"| ratio b / c in each round (the two ran back to back) | {', '.join(round_ratios)} |")
        if flink_ratios:
            lines.append(f"| ratio b / d tuned in each round (the same rounds) | {', '.join(flink_ratios)} |")
        if fallback is not None:
            lines.append(f"| barrierflow's JSON decoder (b, c'): records left to from_json, of the topic's first "
                         f"{min(records, FALLBACK_SAMPLE):,} ({args.text}) | {fallback:.2%} |")
    ratios = [b / c if c else math.nan for b, c in zip(side.get("spark", {}).get("rounds", []),
                                                      side.get("plain", {}).get("rounds", []), strict=False)]
    versus_flink = [b / d if d else math.nan for b, d in zip(side.get("spark", {}).get("rounds", []),
                                                            side.get("flink tuned", {}).get("rounds", []),
                                                            strict=False)]
    figures = {"records": records, "text": args.text, "partitions": args.partitions, "batch": args.batch,
               "stages": shapes, "systems": systems, "ceilings": ceilings, "runs": runs, "side_by_side": side,
               "round_ratios_b_c": ratios, "round_ratios_b_d_tuned": versus_flink, "decoder_fallback": fallback}
    record_run(record, lines, figures, rounds=args.rounds, results=RESULTS_SYSTEMS if args.systems else RESULTS)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as out:
            out.write(f"\n`python -m bench.kafka_source --records {args.records} --batch {args.batch} --partitions "
                      f"{args.partitions} --stages {args.stages} --side-by-side {args.side_by_side} "
                      f"--rounds {args.rounds} --text {args.text}"
                      f"{' --systems' if args.systems else ''}`, {started:%Y-%m-%d %H:%M} UTC, "
                      f"load average (1 min) at the start {load:.1f}, at the end {record.end_load():.1f}:\n\n"
                      + "\n".join(lines) + "\n")
    return 0


def record_run(record: RunRecord, lines: Sequence[str], figures: Mapping[str, Any], *, rounds: int,
               results: Path | None) -> tuple[Path, Path] | None:
    """Print the header and the table's ``lines`` and write the record (:func:`bench.record.report`)
    into ``results`` (None: no record) with ``figures``: every ceiling, every pipeline run, every
    round of the side by side; returns the paths written."""
    what = (f"Kafka source benchmark, {figures.get('records', 0):,} {figures.get('text', 'plain')} records, "
            f"{figures.get('partitions', '?')} partitions")
    return report(record, what, rounds, lines, figures, results_dir=results)


if __name__ == "__main__":
    sys.exit(main())
