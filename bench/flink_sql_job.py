"""The reference job on Flink SQL, for ``python -m bench --compare flink-sql``.

A stand-alone script run by the Python of the Flink virtual environment (``make flink``:
``.venv-flink``, apache-flink pinned in requirements-flink.txt, never in the main
requirements); it imports nothing of barrierflow. It runs the logical job of
shared/design/BENCHMARKS.md: ``keys`` keys (uniformly random instead of the generator's ``i %
keys``, see :func:`_job_sql`) and values in 0..999, grouped by key with a running count and sum
kept in Flink's heap state, into a discarding (blackhole) sink; Flink's local MiniCluster,
parallelism 2 (the machine's cores).

Two configurations: **untuned** (Flink's defaults: each row read from and written back to state
one by one) and, with ``--tuned``, as Flink's performance-tuning guide prescribes for a group
aggregation (:data:`TUNED`): mini-batch aggregation (``table.exec.mini-batch.enabled``,
``allow-latency``, ``size``: rows are buffered and each key's state is accessed once per mini
batch) and local-global (two-phase) aggregation (``table.optimizer.agg-phase-strategy:
TWO_PHASE``: a local pre-aggregation before the shuffle). The split of distinct aggregates, the
guide's third option, does not apply (the job has no ``DISTINCT``).

Usage::

    .venv-flink/bin/python bench/flink_sql_job.py --rows N [--tuned] \\
        [--checkpoint-interval SECONDS] [--keys 10000] [--warmup-rows M] [--parallelism 2]

It first runs the same job over ``--warmup-rows`` rows (JIT warm-up, not measured), then twice
with checkpoints every ``--checkpoint-interval`` seconds (0: none, into a temporary directory
otherwise): a short run over ``--first-rows`` rows (default ``--rows`` / 20) and the measured run
over ``--rows`` rows. It prints one JSON line: ``{"rows", "seconds", "first_rows",
"first_seconds", "records_per_second", "checkpoint_interval", "parallelism", "flink_version",
"config"}`` (``config``: the settings the job ran with beyond parallelism, state backend and
checkpoints). Each ``seconds`` runs from submitting a job to its end, so both include the job's
start (about a second on a warm MiniCluster). Flink has no micro-batches; the short run stands in
for barrierflow's first batch, so that Flink's figure leaves the start out as barrierflow's
"after the first batch" does (:mod:`bench.rates`)::

    records_per_second = (rows - first_rows) / (seconds - first_seconds)

Choose ``--rows`` so that the measured job runs 20-60 s.

**Kafka mode** (``--kafka HOST:PORT --topic T --partitions P --jars JAR[,JAR]``, for ``python -m
bench --scenario kafka``): the source is the topic instead of datagen, read with Flink's Kafka
connector (``flink-sql-connector-kafka``, the ``flink-kafka`` JVM artifact set, passed as
``pipeline.jars``) from the earliest offsets, JSON records ``{"key", "value", "event_time"}``
(the benchmark's), grouped by ``key`` with a running count and sum of ``value`` into the
blackhole sink. ``--rows`` is the records in the topic, spread evenly over its partitions (as
the benchmark produces them: record ``i`` to partition ``i % P``, no transactions, so offsets
are record counts). Each run is bounded by offsets (``scan.bounded.mode``): the warm-up and the
short run end at ``--warmup-rows`` / ``--first-rows`` divided evenly over the partitions
(:func:`specific_offsets`), the measured run at the offsets the topic had when it started (the
whole topic). The JSON line is the same (``first_rows``: what the short run really read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time

#: Flink's documented tuning of a group aggregation (Flink docs, "Performance Tuning": MiniBatch
#: Aggregation, Local-Global Aggregation). ``allow-latency`` 1 s: no longer than barrierflow's
#: checkpoint interval in the comparison (a mini batch is also flushed at every checkpoint);
#: ``size``: the most rows one aggregate task buffers.
TUNED = {
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "1 s",
    "table.exec.mini-batch.size": "20000",
    "table.optimizer.agg-phase-strategy": "TWO_PHASE",
}


def _job_sql(rows: int, keys: int, suffix: str) -> list[str]:
    # Random keys and values: datagen's 'sequence' kind keeps every value still to emit in its
    # checkpointed state, which would make Flink's checkpoints the bottleneck; uniform random
    # keys over the same key range give the same state size and update pattern.
    return [
        f"CREATE TEMPORARY TABLE src_{suffix} (k BIGINT, v BIGINT) WITH ('connector' = 'datagen', "
        f"'number-of-rows' = '{rows}', 'rows-per-second' = '1000000000000', "
        f"'fields.k.kind' = 'random', 'fields.k.min' = '0', 'fields.k.max' = '{keys - 1}', "
        "'fields.v.kind' = 'random', 'fields.v.min' = '0', 'fields.v.max' = '999')",
        f"CREATE TEMPORARY TABLE out_{suffix} (k BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')",
        f"INSERT INTO out_{suffix} SELECT k, COUNT(*), SUM(v) FROM src_{suffix} GROUP BY k",
    ]


def specific_offsets(rows: int, partitions: int) -> str:
    """``scan.bounded.specific-offsets`` that stop each of ``partitions`` partitions after
    ``rows // partitions`` records (offsets are exclusive ends): ``partition:0,offset:N;...``."""
    if partitions < 1 or rows < partitions:
        raise ValueError(f"need at least one record per partition (rows {rows}, partitions {partitions})")
    return ";".join(f"partition:{p},offset:{rows // partitions}" for p in range(partitions))


def kafka_job_sql(bootstrap: str, topic: str, suffix: str, bound: str | None) -> list[str]:
    """The job's statements on a Kafka topic (module docstring, Kafka mode): read from the
    earliest offsets to ``bound`` (``scan.bounded.specific-offsets``), or to the offsets the
    topic has when the job starts when ``bound`` is None."""
    bounded = ("'scan.bounded.mode' = 'latest-offset'" if bound is None else
               f"'scan.bounded.mode' = 'specific-offsets', 'scan.bounded.specific-offsets' = '{bound}'")
    return [
        f"CREATE TEMPORARY TABLE src_{suffix} (`key` BIGINT, `value` BIGINT, event_time TIMESTAMP_LTZ(3)) WITH ("
        f"'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}', "
        f"'properties.group.id' = 'flink-bench-{suffix}', 'properties.isolation.level' = 'read_committed', "
        f"'scan.startup.mode' = 'earliest-offset', {bounded}, "
        "'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601')",
        f"CREATE TEMPORARY TABLE out_{suffix} (`key` BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')",
        f"INSERT INTO out_{suffix} SELECT `key`, COUNT(*), SUM(`value`) FROM src_{suffix} GROUP BY `key`",
    ]


def _run(rows: int, keys: int, interval: float, parallelism: int, suffix: str, tuning: dict[str, str],
         statements: list[str] | None = None, jars: list[str] | None = None) -> float:
    """Seconds from submitting the job (``statements``, default the datagen job) to its end."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("state.backend.type", "hashmap")
    if jars:
        conf.set("pipeline.jars", ";".join(f"file://{jar}" for jar in jars))
    for key, value in tuning.items():
        conf.set(key, value)
    directory = None
    if interval > 0:
        directory = tempfile.mkdtemp(prefix="flink-checkpoints-")
        conf.set("execution.checkpointing.interval", f"{int(interval * 1000)} ms")
        conf.set("execution.checkpointing.dir", f"file://{directory}")
    try:
        *ddl, insert = statements if statements is not None else _job_sql(rows, keys, suffix)
        for statement in ddl:
            env.execute_sql(statement)
        started = time.perf_counter()
        env.execute_sql(insert).wait()
        return time.perf_counter() - started
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--checkpoint-interval", type=float, default=0.0)
    parser.add_argument("--warmup-rows", type=int, default=5_000_000)
    parser.add_argument("--first-rows", type=int, help="rows of the short run that stands in for the first "
                        "batch (default: --rows / 20)")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--tuned", action="store_true", help="Flink's documented tuning of a group aggregation: "
                        "mini-batch and two-phase aggregation (TUNED)")
    parser.add_argument("--mini-batch-size", type=int, help="with --tuned: table.exec.mini-batch.size "
                        f"(default {TUNED['table.exec.mini-batch.size']})")
    parser.add_argument("--kafka", metavar="HOST:PORT", help="Kafka mode: read --topic on this broker instead of "
                        "datagen (module docstring)")
    parser.add_argument("--topic", help="Kafka mode: the topic (--rows records over --partitions partitions)")
    parser.add_argument("--partitions", type=int, default=1, help="Kafka mode: the topic's partitions")
    parser.add_argument("--jars", default="", help="Kafka mode: the connector's jars, comma separated (the "
                        "flink-kafka JVM artifact set)")
    args = parser.parse_args(argv)
    if args.kafka and (not args.topic or not args.jars or args.partitions < 1 or args.rows < args.partitions):
        parser.error("--kafka needs --topic, --jars and --partitions >= 1 with --rows >= --partitions")
    if args.rows < 1 or args.keys < 1 or args.parallelism < 1 or args.checkpoint_interval < 0:
        parser.error("--rows, --keys and --parallelism must be >= 1, --checkpoint-interval >= 0")
    first_rows = args.first_rows if args.first_rows is not None else max(1, args.rows // 20)
    if not 1 <= first_rows < args.rows:
        parser.error("--first-rows must be >= 1 and fewer than --rows")
    if args.mini_batch_size is not None and (not args.tuned or args.mini_batch_size < 1):
        parser.error("--mini-batch-size needs --tuned and must be >= 1")
    import pyflink

    tuning = dict(TUNED) if args.tuned else {}
    if args.mini_batch_size is not None:
        tuning["table.exec.mini-batch.size"] = str(args.mini_batch_size)
    if args.kafka:
        jars = [j for j in args.jars.split(",") if j]

        def run(rows: int | None, interval: float, suffix: str) -> float:
            bound = None if rows is None else specific_offsets(rows, args.partitions)
            return _run(0, args.keys, interval, args.parallelism, suffix, tuning,
                        kafka_job_sql(args.kafka, args.topic, suffix, bound), jars)

        first_rows = max(1, first_rows // args.partitions) * args.partitions
        if args.warmup_rows > 0:
            run(max(args.partitions, min(args.warmup_rows, args.rows)), 0.0, "warmup")
        first_seconds = run(first_rows, args.checkpoint_interval, "first")
        seconds = run(None, args.checkpoint_interval, "measured")
    else:
        if args.warmup_rows > 0:
            _run(args.warmup_rows, args.keys, 0.0, args.parallelism, "warmup", tuning)
        first_seconds = _run(first_rows, args.keys, args.checkpoint_interval, args.parallelism, "first", tuning)
        seconds = _run(args.rows, args.keys, args.checkpoint_interval, args.parallelism, "measured", tuning)
    steady = seconds - first_seconds
    print(json.dumps({"rows": args.rows, "seconds": round(seconds, 3),
                      "first_rows": first_rows, "first_seconds": round(first_seconds, 3),
                      "records_per_second": round((args.rows - first_rows) / steady, 1) if steady > 0 else None,
                      "checkpoint_interval": args.checkpoint_interval, "parallelism": args.parallelism,
                      "flink_version": getattr(pyflink, "__version__", "?"), "config": tuning}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
