"""What decoding costs plain Spark on the Kafka benchmark's job: the side by side's system c
(``bench/kafka_source.py``, step 7c: Spark's connector -> ``from_json`` -> keyed count and sum
-> ``noop``) against the same reads decoded otherwise, in one SparkSession on one topic.

Modes (each a plain Structured Streaming query with its own checkpoint, the side by side's
batches, trigger and consumer settings):

* ``from_json``: system c itself (:func:`bench.kafka_source.run_plain_spark`);
* ``barrierflow``: system c', c decoded by barrierflow's JSON decoder
  (:mod:`barrierflow.sources.flat_json`, the decoder of ``reader: spark``), the same rows;
* ``json_tuple``: ``json_tuple(value, 'key', 'value')``, the value cast to ``bigint``;
* ``variant``: ``parse_json(value)``, then ``variant_get`` of ``key`` and ``value``;
* ``none``: no decoding: the count and sum of each record's length, grouped by Kafka partition.
  The rate of Spark's reads, shuffle and aggregation alone: a ceiling no decoder can pass.

After a warm-up of each mode, ``--rounds`` rounds run every mode once, the order reversed
every other round; each mode's figure is the median, records/s after the first batch as
:func:`bench.kafka_source.progress_rate` counts it. Usage (from the repository root)::

    PYSPARK_PYTHON=$PWD/.venv/bin/python PYTHONPATH=include:. .venv/bin/python -m bench.kafka_decoding \\
        [--records 8000000] [--rounds 3] [--text plain|realistic]

It prints what it ran (command, commit, date, cores, load average, rounds) above the table and
writes the record, ``YYYY-MM-DD-HHMM-decoding.md`` and ``.json`` with every round's records/s
per mode (:mod:`bench.record`), to bench/results/kafka-side-by-side/.

The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import json_records
from bench import kafka_source as ks
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report

MODES = ("from_json", "barrierflow", "json_tuple", "variant", "none")
BATCH, PARTITIONS = 100_000, 4
#: Where each run's record goes (``...-decoding.md``, beside the side by side's runs).
RESULTS = RESULTS_ROOT / "kafka-side-by-side"


def _decoded(frame: Any, mode: str) -> Any:
    """``frame`` (Spark's Kafka rows) as ``key, value`` columns, decoded as ``mode`` says."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    if mode == "json_tuple":
        return frame.select(F.json_tuple(text, "key", "value").alias("key", "v")).select(
            "key", F.col("v").cast("bigint").alias("value"))
    if mode == "variant":
        return frame.select(F.parse_json(text).alias("j")).select(
            F.variant_get("j", "$.key", "string").alias("key"), F.variant_get("j", "$.value", "bigint").alias("value"))
    return frame.select(F.col("partition").alias("key"), F.length("value").alias("value"))


def run_mode(spark: Any, servers: str, topic: str, mode: str, records: int, cap: float) -> float:
    """One bounded run of ``mode``; records/s after the first batch."""
    if mode in ("from_json", "barrierflow"):
        return float(ks.run_plain_spark(spark, servers, topic, records=records, batch=BATCH, partitions=PARTITIONS,
                                        cap=cap, decoder=mode)["steady"])
    from barrierflow.sources.spark_kafka import CONSUMER_SETTINGS
    from pyspark.sql import functions as F

    work = Path(tempfile.mkdtemp(prefix="bf-kdecode-"))
    reads = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(BATCH * PARTITIONS))
             .option("failOnDataLoss", "true").option("kafka.isolation.level", "read_committed")
             .options(**{f"kafka.{name}": value for name, value in CONSUMER_SETTINGS.items()}).load())
    totals = _decoded(reads, mode).groupBy("key").agg(F.count(F.lit(1)).alias("count"),
                                                     F.sum("value").alias("value_sum"))
    query = (totals.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(work / "c"))
             .trigger(processingTime=f"{int(ks.TRIGGER * 1000)} milliseconds").start())
    seen: dict[int, Any] = {}
    began = time.monotonic()
    try:
        while time.monotonic() - began < cap and query.isActive:
            seen.update({int(p["batchId"]): p for p in query.recentProgress})
            if sum(int(p["numInputRows"]) for p in seen.values()) >= records:
                break
            query.awaitTermination(0.2)
        seen.update({int(p["batchId"]): p for p in query.recentProgress})
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    return ks.progress_rate(list(seen.values()))


def render(rates: dict[str, list[float]], fallback: float, sample: int) -> list[str]:
    """The table's lines: per mode the median records/s and every round's."""
    lines = ["| decoding (plain Spark, the side by side's job) | records/s after the first batch (median) | rounds |",
             "|---|---:|---|"]
    for mode in MODES:
        lines.append(f"| {mode} | {statistics.median(rates[mode]):,.0f} | "
                     f"{', '.join(f'{r:,.0f}' for r in rates[mode])} |")
    lines.append(f"barrierflow's decoder left {fallback:.2%} of the topic's first {sample:,} records to from_json")
    return lines


def record_run(record: RunRecord, rates: dict[str, list[float]], fallback: float, *, sample: int, records: int,
               text: str, rounds: int, results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and the table (:func:`render`) and write the record (:func:`bench.record.report`)
    into ``results`` (None: no record) with every round's records/s per mode; returns the paths
    written."""
    figures = {"records": records, "text": text, "partitions": PARTITIONS, "batch": BATCH,
               "records_per_second": rates, "decoder_fallback": fallback, "fallback_sample": sample}
    return report(record, f"Kafka decoding in plain Spark, {records:,} {text} records", rounds,
                  render(rates, fallback, sample), figures, results_dir=results, suffix="decoding")


def main(argv: list[str] | None = None, results: Path | None = RESULTS) -> int:
    """Run the benchmark (module docstring) with the options of ``argv`` (default the command
    line's); the record goes into ``results`` (None: no record)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=ks.RECORDS, help="records in the topic")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds, after a warm-up")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds a run may take at most")
    parser.add_argument("--text", choices=json_records.TEXTS, default="plain",
                        help="the records (bench/json_records.py): plain or realistic (names, URLs, comments; about "
                             "30 %% with non-ASCII text)")
    args = parser.parse_args(argv)
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.session import build_session
    from barrierflow.spec.models import SparkSpec

    records = args.records - args.records % PARTITIONS
    record = RunRecord.start("kafka-decoding", command_line() if argv is None else " ".join(
        ["python -m bench.kafka_decoding", *(shlex.quote(a) for a in argv)]))
    ks.say(f"Kafka decoding in plain Spark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load "
           f"average {os.getloadavg()[0]:.1f}; {records:,} {args.text} records, {PARTITIONS} partitions, "
           f"{BATCH:,} per partition and batch")
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with ExitStack() as stack:
        servers = stack.enter_context(embedded_broker(None, 30.0, 10.0))
        topic = f"kdecode-{uuid.uuid4().hex[:8]}"
        ks.produce(servers, topic, records, PARTITIONS, args.text)
        spark = build_session(SparkSpec.model_validate({"master": "local[2]", "shuffle_partitions": 2}),
                              app_name="barrierflow-kafka-decoding", jvm_sets=["spark-kafka"])
        for mode in MODES:  # warm-up: JIT and the connector's consumers, figures dropped
            run_mode(spark, servers, topic, mode, records, args.cap)
        for index in range(args.rounds):
            for mode in (MODES if index % 2 == 0 else tuple(reversed(MODES))):
                rates[mode].append(run_mode(spark, servers, topic, mode, records, args.cap))
        sample = min(records, ks.FALLBACK_SAMPLE)
        fallback = json_records.fallback_rate(spark, json_records.values(sample, ks.KEYS, args.text),
                                              {"key": "BIGINT", "value": "BIGINT", "event_time": "STRING"})
        spark.stop()
    record_run(record, rates, fallback, sample=sample, records=records, text=args.text, rounds=args.rounds,
               results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
