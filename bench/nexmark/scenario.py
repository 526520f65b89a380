"""``python -m bench --scenario nexmark``: Nexmark q0, q1, q2, q5, q7, q8 on barrierflow and on
Flink SQL, side by side on one Kafka topic.

One run:

1. An embedded Apache Kafka broker and one topic of ``partitions`` partitions, filled with
   ``events`` Nexmark events (:mod:`bench.nexmark.generator`, seed ``seed``, ``rate`` events per
   second of event time), event ``i`` to partition ``i % partitions``, no transactions.
2. ``rounds`` rounds; in each, every query runs on both engines, which one first alternating
   per round (barrierflow first in odd rounds):

   * **barrierflow**: the query's pipeline (:mod:`bench.nexmark.queries`: Spark's connector,
     barrierflow's JVM JSON decoder, ABS checkpoints every 1 s, a ``discard`` sink), ``local[2]``
     in this process's SparkSession, from the topic's start for ``seconds`` (or to its end);
   * **Flink SQL**: the same query (:mod:`bench.nexmark.flink_job`: Flink's Kafka connector,
     checkpoints every 1 s exactly-once, a blackhole sink, parallelism 2) over as many events as
     it read in about ``seconds`` in its previous run (at most the topic);
   * **plain Spark** (``spark``): the query's transformation in a plain Structured Streaming query
     of the same SparkSession, no barrierflow around it (:func:`run_plain_spark`): the same input
     frame as barrierflow's stage (Spark's connector with barrierflow's options and consumer
     settings, barrierflow's decoder), Spark's ``withWatermark`` at the same delay, the same
     trigger, Spark's own checkpoint (every batch), the ``noop`` sink; ``seconds`` after its
     first batch or to the topic's end.

   A warm-up run of barrierflow's q0 comes first (its figure dropped): the first query of a
   SparkSession pays for the JVM's compilation.
3. Per query and engine: **events/s** read after the first batch (:mod:`bench.rates`: from the
   offsets committed, the first batch's events and time left out; Flink's short run of a
   twentieth of the events stands in for its first batch), its median over the rounds with the
   lowest and highest, per core (2 cores), the ratios barrierflow / Flink and barrierflow /
   plain Spark of the medians and of each round, and the checkpoint durations p50 / p99 (trigger to completion; Flink's
   end-to-end duration from its REST API), over all rounds.

Printed with what ran (commit, date, load average, rounds, settings); the table and the figures
are also written to ``results`` (default bench/results/nexmark/) as ``YYYY-MM-DD-HHMM.md`` and
``.json``. The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.nexmark import generator
from bench.nexmark.queries import QUERIES, TRIGGER, Query, pipeline_spec
from bench.provenance import commit
from bench.record import free_stem
from bench.spread import median, rounds_note

#: The engines: barrierflow, Flink SQL, and plain Spark running barrierflow's own transformation
#: (what barrierflow costs beside the Spark it runs on).
ENGINES = ("barrierflow", "flink", "spark")
CORES = 2
#: Defaults sized so that ``--rounds 3`` of all six queries on the three engines takes about 25 minutes on
#: 2 quiet cores.
DEFAULT_EVENTS, DEFAULT_SECONDS, DEFAULT_PARTITIONS, DEFAULT_BATCH = 4_000_000, 15.0, 4, 100_000
#: Flink's first run of a query reads this many events per measured second (then sized from its last).
FLINK_FIRST_RATE = 60_000.0
RESULTS = Path(__file__).resolve().parents[1] / "results" / "nexmark"
FLINK_JOB = Path(__file__).with_name("flink_job.py")
#: Seconds a barrierflow run may take to start (its first batch) besides its measured seconds.
START_CAP = 180.0
#: Events the decoder's fallback share is counted on.
FALLBACK_SAMPLE = 100_000
_SPARK_TYPES = {"long": "BIGINT", "string": "STRING", "double": "DOUBLE", "boolean": "BOOLEAN",
                "timestamp": "STRING"}


def say(line: str = "") -> None:
    print(line, flush=True)


@dataclass
class Figures:
    """One query on one engine over the rounds: events/s after the first batch per round, the
    events each run read, its checkpoint durations (ms), failures."""

    rates: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    checkpoint_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def median(self) -> float:
        return median(self.rates)

    def spread(self) -> str:
        finite = [r for r in self.rates if math.isfinite(r)]
        return f"{min(finite):,.0f}-{max(finite):,.0f}" if finite else "-"

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile (nearest rank) of the checkpoint durations, ms; NaN for none."""
        if not self.checkpoint_ms:
            return math.nan
        ordered = sorted(self.checkpoint_ms)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def fill_topic(servers: str, topic: str, events: int, partitions: int, config: generator.GeneratorConfig,
               chunk: int = 100_000) -> float:
    """Create ``topic`` and produce the first ``events`` events to it (event ``i`` to partition
    ``i % partitions``); seconds taken (generation included)."""
    from barrierflow.kafka_io import KafkaIOError, ProducerSettings, shared_producer
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    producer = shared_producer(ProducerSettings(servers=servers))
    began = time.monotonic()
    while True:  # ready: the broker's metadata shows the new topic's partitions
        try:
            producer.partitions(topic)
            break
        except KafkaIOError:
            if time.monotonic() - began > 30:
                raise
            time.sleep(0.05)
    stream = generator.events(events, config)
    sent = 0
    while batch := [generator.encode(e) for e in itertools.islice(stream, chunk)]:
        producer.send_all(topic, batch, [(sent + i) % partitions for i in range(len(batch))])
        sent += len(batch)
    producer.settle()
    return time.monotonic() - began


def run_barrierflow(spark: Any, query: Query, *, servers: str, topic: str, seconds: float, batch: int
                    ) -> tuple[float, int, list[float]]:
    """One run of ``query``'s pipeline for ``seconds`` after its first batch (or to the topic's end;
    at most ``seconds`` + :data:`START_CAP` in all): events/s after the first batch, events read,
    checkpoint durations (ms)."""
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.spec import parse_spec

    from bench.rates import job_rate

    work = Path(tempfile.mkdtemp(prefix="bf-nexmark-"))
    try:
        job = StreamingJob(parse_spec(pipeline_spec(query, servers=servers, topic=topic, work=work, batch=batch)),
                           spark=spark)
        first: list[float] = []  # when the first batch was seen committed

        def seen(progress: Any) -> None:
            if not first and progress.batch_id is not None and progress.records > 0:
                first.append(time.monotonic())

        result = job.run(until_exhausted=True, duration=seconds + START_CAP, progress=seen, progress_every=0.2,
                         until=lambda _job: bool(first) and time.monotonic() - first[0] >= seconds)
        durations = [(m.completion_time - m.trigger_time).total_seconds() * 1000 for m in result.completed]
        return job_rate(result), result.records, durations
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class _PlainContext:
    """What a query's transformation asks of its context, for a plain Spark query: Spark's
    watermark on ``date_time`` at :data:`bench.nexmark.queries.WATERMARK_DELAY`."""

    def with_watermark(self, df: Any) -> Any:
        from bench.nexmark.queries import WATERMARK_DELAY

        return df.withWatermark("date_time", WATERMARK_DELAY)


def run_plain_spark(spark: Any, query: Query, *, servers: str, topic: str, partitions: int, seconds: float,
                    batch: int, events: int, output: Path | None = None) -> tuple[float, int, list[float]]:
    """One run of ``query``'s transformation on plain Spark (module docstring, step 2) for
    ``seconds`` after its first batch or until it read ``events`` (at most ``seconds`` +
    :data:`START_CAP` in all): events/s after the first batch (:func:`bench.kafka_source.progress_rate`,
    the definition of :mod:`bench.rates`), events read, no checkpoint durations. ``output``: a
    Parquet folder to write the rows to instead of the ``noop`` sink (tests)."""
    from barrierflow.sources.spark_kafka import connector_options, decoded_rows, load_connector
    from barrierflow.spec import parse_spec

    from bench.kafka_source import progress_rate

    work = Path(tempfile.mkdtemp(prefix="bf-nexmark-plain-"))
    try:
        stage = parse_spec(pipeline_spec(query, servers=servers, topic=topic, work=work, batch=batch))
        source = stage.sources[0]
        options = connector_options(source, [f"{topic}:{p}" for p in range(partitions)])
        raw = load_connector(spark.readStream.format("kafka").options(**options), "the Nexmark plain Spark run")
        frame = query.function(decoded_rows(raw, source), _PlainContext())  # type: ignore[arg-type]
        writer = frame.writeStream.outputMode("append").option("checkpointLocation", str(work / "checkpoint"))
        writer = writer.format("parquet").option("path", str(output)) if output else writer.format("noop")
        seen: dict[int, Any] = {}
        query_ = writer.trigger(processingTime=f"{int(TRIGGER * 1000)} milliseconds").start()
        began, first = time.monotonic(), None
        try:
            while time.monotonic() - began < seconds + START_CAP and query_.isActive:
                seen.update({int(p["batchId"]): p for p in query_.recentProgress})
                read = sum(int(p["numInputRows"]) for p in seen.values())
                if first is None and read > 0:
                    first = time.monotonic()
                if read >= events or (first is not None and time.monotonic() - first >= seconds):
                    break
                query_.awaitTermination(0.2)
            if output is not None:
                query_.processAllAvailable()
            seen.update({int(p["batchId"]): p for p in query_.recentProgress})
            failure = query_.exception()
        finally:
            query_.stop()
        if failure is not None:
            raise RuntimeError(f"plain Spark's {query.name} failed: {failure}")
        return progress_rate(list(seen.values())), sum(int(p["numInputRows"]) for p in seen.values()), []
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_flink(python: Path, jars: list[str], query: Query, *, servers: str, topic: str, partitions: int,
              rows: int) -> tuple[float, int, list[float], str]:
    """One run of ``query`` on Flink SQL over ``rows`` events (:mod:`bench.nexmark.flink_job`):
    events/s counted as :func:`bench.flink_compare.flink_rate` counts it, events read, checkpoint
    durations (ms), Flink's version.

    Raises:
        UserInputError: the job failed (the message holds the end of its output).
    """
    from bench.flink_compare import flink_rate, run_flink_script

    command = [str(python), str(FLINK_JOB), "--query", query.name, "--fields", json.dumps(query.fields),
               "--kafka", servers, "--topic", topic, "--partitions", str(partitions), "--rows", str(rows),
               "--checkpoint-interval", "1", "--parallelism", str(CORES), "--jars", ",".join(jars)]
    result = run_flink_script(command)
    return (flink_rate(result), int(result["rows"]), [float(d) for d in result.get("checkpoint_ms", [])],
            str(result.get("flink_version", "?")))


def fallback_share(spark: Any, config: generator.GeneratorConfig, fields: dict[str, str]) -> float:
    """The share of the topic's first events barrierflow's JSON decoder leaves to ``from_json``."""
    from bench.json_records import fallback_rate

    return fallback_rate(spark, generator.values(FALLBACK_SAMPLE, config),
                         {name: _SPARK_TYPES[kind] for name, kind in fields.items()})


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if math.isfinite(a) and math.isfinite(b) and b > 0 else "n/a"


def render(figures: dict[str, dict[str, Figures]], rounds: int) -> list[str]:
    """The table (Markdown lines): per query and engine the median events/s, its spread, per core,
    checkpoint p50 / p99; on barrierflow's line the ratios barrierflow / Flink and barrierflow /
    plain Spark of the medians and per round (empty for an engine that did not run)."""
    lines = ["| query | engine | events/s (median) | lowest-highest | per core | checkpoint p50 / p99 ms "
             "| barrierflow / Flink (medians; per round) | barrierflow / plain Spark (medians; per round) |",
             "|---|---|---:|---:|---:|---:|---|---|"]

    def ratio(f: Figures, other: Figures | None) -> str:
        if other is None:
            return ""
        per_round = [_ratio(a, b) for a, b in zip(f.rates, other.rates, strict=False)]
        return f"{_ratio(f.median(), other.median())}; {', '.join(per_round)}"

    for name, engines in figures.items():
        for engine, f in engines.items():
            ratios = (ratio(f, engines.get("flink")), ratio(f, engines.get("spark"))) if engine == "barrierflow" \
                else ("", "")
            failed = f" ({len(f.failures)} failed)" if f.failures else ""
            lines.append(f"| {name} | {engine}{failed} | {f.median():,.0f} | {f.spread()} | "
                         f"{f.median() / CORES:,.0f} | {f.percentile(50):,.0f} / {f.percentile(99):,.0f} | "
                         f"{ratios[0]} | {ratios[1]} |")
    return lines


def run_nexmark_benchmark(*, events: int = DEFAULT_EVENTS, seconds: float = DEFAULT_SECONDS, rounds: int = 3,
                          queries: Sequence[str] = tuple(QUERIES), engines: Sequence[str] = ENGINES,
                          partitions: int = DEFAULT_PARTITIONS, batch: int = DEFAULT_BATCH,
                          rate: float = generator.DEFAULT_RATE, seed: int = generator.DEFAULT_SEED,
                          results: Path | None = RESULTS, markdown: str | None = None,
                          command: str = "python -m bench --scenario nexmark") -> dict[str, Any]:
    """Run the scenario (module docstring); return its machine-readable result (also written to
    ``results`` unless None).

    Raises:
        UserInputError: bad options, or Flink (``make flink``) or a JVM artifact set (``make
            install``) is missing.
    """
    from barrierflow.errors import UserInputError

    unknown = [q for q in queries if q not in QUERIES]
    if unknown or not queries:
        raise UserInputError(f"bench --scenario nexmark: --queries takes {', '.join(QUERIES)} (got {list(queries)})")
    if not set(engines) <= set(ENGINES) or not engines:
        raise UserInputError(f"bench --scenario nexmark: --engines takes {', '.join(ENGINES)} (got {list(engines)})")
    if events < 50 * partitions or seconds <= 0 or rounds < 1 or batch < 1:
        raise UserInputError(f"bench --scenario nexmark needs --events >= 50 x partitions ({50 * partitions}), "
                             f"--seconds > 0, --rounds >= 1 (got {events}, {seconds:g}, {rounds})")
    from barrierflow.kafka_io.embedded_broker import embedded_broker
    from barrierflow.runtime.session import build_session, source_jars
    from barrierflow.spec.models import SparkSpec

    from bench.flink_compare import flink_python
    from bench.kafka_source import flink_jars

    source_jars([], ["spark-kafka"])
    flink = (flink_python(), flink_jars()) if "flink" in engines else None
    config = generator.GeneratorConfig(seed=seed, rate=rate)
    # at least 10 batches in a topic (a run's first batch is not counted)
    batch = max(1, min(batch, events // partitions // 10))
    started, load_start, revision = datetime.now(UTC), os.getloadavg()[0], commit()
    say(f"Nexmark side by side, {started:%Y-%m-%d %H:%M} UTC, commit {revision}, {os.cpu_count()} cores, load "
        f"average {load_start:.1f}; {rounds} round(s) of {', '.join(queries)} on {', '.join(engines)}; "
        f"{events:,} events (seed {seed}, {rate:,.0f} events/s of event time), {partitions} partitions, "
        f"{seconds:g} s per run")
    figures: dict[str, dict[str, Figures]] = {q: {e: Figures() for e in engines} for q in queries}
    flink_version, fallback = "?", math.nan
    with embedded_broker(None, 60.0, 10.0) as servers:
        topic = f"nexmark-{uuid.uuid4().hex[:8]}"
        fill_seconds = fill_topic(servers, topic, events, partitions, config)
        say(f"topic {topic}: {events:,} events generated and produced in {fill_seconds:.0f} s")
        spark = build_session(SparkSpec.model_validate({"master": f"local[{CORES}]", "shuffle_partitions": CORES}),
                              app_name="barrierflow-nexmark-bench", jvm_sets=["spark-kafka"])
        try:
            if "barrierflow" in engines:
                fallback = fallback_share(spark, config, QUERIES["q0"].fields)
                run_barrierflow(spark, QUERIES["q0"], servers=servers, topic=topic, seconds=min(seconds, 10.0),
                                batch=batch)
            flink_rates: dict[str, float] = {}
            for number in range(rounds):
                order = list(engines) if number % 2 == 0 else list(reversed(engines))
                for name in queries:
                    query = QUERIES[name]
                    for engine in order:
                        f = figures[name][engine]
                        try:
                            if engine == "barrierflow":
                                rate_, read, durations = run_barrierflow(spark, query, servers=servers, topic=topic,
                                                                         seconds=seconds, batch=batch)
                            elif engine == "spark":
                                rate_, read, durations = run_plain_spark(
                                    spark, query, servers=servers, topic=topic, partitions=partitions,
                                    seconds=seconds, batch=batch, events=events)
                            else:
                                assert flink is not None
                                rows = min(events, max(partitions * 40,
                                                       int(flink_rates.get(name, FLINK_FIRST_RATE) * seconds)))
                                rate_, read, durations, flink_version = run_flink(
                                    flink[0], flink[1], query, servers=servers, topic=topic, partitions=partitions,
                                    rows=rows)
                                if math.isfinite(rate_) and rate_ > 0:
                                    flink_rates[name] = rate_
                        except Exception as exc:  # the figure to report is the failure itself
                            say(f"round {number + 1} {name} {engine} FAILED: {str(exc)[-1500:]}")
                            f.failures.append(f"round {number + 1}: {type(exc).__name__}")
                            f.rates.append(math.nan)
                            continue
                        f.rates.append(rate_)
                        f.events.append(read)
                        f.checkpoint_ms.extend(durations)
                        say(f"round {number + 1} {name} {engine:11} {rate_:>12,.0f} events/s  ({read:,} events, "
                            f"{len(durations)} checkpoints)")
        finally:
            spark.stop()
    load_end = os.getloadavg()[0]
    table = render(figures, rounds)
    head = (f"`{command}`, {started:%Y-%m-%d %H:%M} UTC, commit {revision}, {os.cpu_count()} cores, load "
            f"average (1 min) {load_start:.1f} at the start, {load_end:.1f} at the end; {rounds} round(s)"
            f"{rounds_note(rounds)}, engines alternating; {events:,} events (seed {seed}, {rate:,.0f} events/s "
            f"of event time), {partitions} "
            f"partitions, {seconds:g} s per barrierflow run (Flink: as many events as it read in about that long); "
            f"barrierflow local[{CORES}], Flink SQL {flink_version} parallelism {CORES}; 1 s checkpoints, "
            f"exactly-once, discarding sinks; barrierflow's JSON decoder left "
            + (f"{fallback:.2%}" if math.isfinite(fallback) else "n/a")
            + f" of the first {FALLBACK_SAMPLE:,} events to from_json.")
    say()
    for line in table:
        say(line)
    document = {"scenario": "nexmark", "command": command, "started": started.isoformat(timespec="seconds"),
                "commit": revision, "cores": os.cpu_count(), "load_average": [load_start, load_end],
                "rounds": rounds, "events": events, "seed": seed, "event_rate": rate, "partitions": partitions,
                "seconds": seconds, "batch": batch, "flink_version": flink_version, "decoder_fallback": fallback,
                "queries": {q: {e: {"events_per_second": f.rates, "median": f.median(),
                                    "per_core": f.median() / CORES, "events": f.events,
                                    "checkpoint_ms_p50": f.percentile(50), "checkpoint_ms_p99": f.percentile(99),
                                    "checkpoints": len(f.checkpoint_ms), "failures": f.failures}
                                for e, f in engines_.items()} for q, engines_ in figures.items()}}
    text = "\n".join([f"# Nexmark side by side, {started:%Y-%m-%d %H:%M} UTC", "", head, "", *table]) + "\n"
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
        stem = free_stem(results, started)
        stem.with_suffix(".md").write_text(text, encoding="utf-8")
        stem.with_suffix(".json").write_text(json.dumps(_clean(document), indent=1, allow_nan=False) + "\n",
                                             encoding="utf-8")
        say(f"written: {stem}.md, {stem}.json")
    if markdown:
        Path(markdown).write_text(text, encoding="utf-8")
    return document


def _clean(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit("run it as: python -m bench --scenario nexmark")
