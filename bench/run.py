"""``python -m bench``: the benchmarks that print numbers (docs/benchmarks.md), run by ``make bench``.

They live beside the library, never in it: the wheel ships ``include/barrierflow`` only. Run
from the repository root (``include/pipelines/bench.yaml`` is the default spec), with the
project's virtualenv: ``.venv/bin/python -m bench --seconds 20 --rounds 3 --markdown FILE``.

Exit codes as the ``barrierflow`` CLI's: 0 done, 2 bad options, 1 a failure (or a soak that
found a problem).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from types import FrameType

from barrierflow.errors import BarrierflowError, UserInputError

from bench.spread import MIN_ROUNDS

EXIT_OK, EXIT_RUNTIME, EXIT_BAD_INPUT = 0, 1, 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UserInputError(f"{self.prog}: {message}")


#: Seconds per mode and round unless ``--seconds`` says otherwise.
DEFAULT_SECONDS = 30.0
#: The stages scenario's default: 60 s per mode measured mostly the JVM's warm-up (two runs
#: side by side: 6 global checkpoints completed, medians 3.0 s timed-out and 2.6x unaligned,
#: against 40-51 and 1.75 s / 1.28x in 120 s runs of the same code).
STAGES_SECONDS = 120.0
#: The nexmark scenario's default per run: six queries, three engines, three rounds in about 25 minutes.
NEXMARK_SECONDS = 15.0
#: ``--keys`` unless given: the restore scenario's, the upgrade scenario's.
RESTORE_KEYS, UPGRADE_KEYS = 2_000_000, 3_400_000


def seconds_per_mode(given: float | None, scenario: str, compare: str | None = None) -> float:
    """``--seconds`` if given, else the scenario's default (:data:`STAGES_SECONDS` for the
    stages scenario, :data:`DEFAULT_SECONDS` otherwise)."""
    if given is not None:
        return given
    if scenario == "nexmark" and not compare:
        return NEXMARK_SECONDS
    return STAGES_SECONDS if scenario == "stages" and not compare else DEFAULT_SECONDS


def _seconds_at_least_zero(text: str) -> float:
    """``--warm-up``'s value: seconds, 0 or more (argparse names the option and the value otherwise)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; give e.g. 20") from None
    if not seconds >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more seconds (0: no warm-up)")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The benchmark options (those of the former ``barrierflow bench``)."""
    parser = _ArgumentParser(prog="python -m bench",
                             description="throughput with and without ABS checkpoints, and the other scenarios of "
                                         "docs/benchmarks.md")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--spec", default="include/pipelines/bench.yaml")
    parser.add_argument("--seconds", type=float, default=None,
                        help=f"measured seconds per mode and round (default {DEFAULT_SECONDS:g}; the stages scenario "
                             f"{STAGES_SECONDS:g}: its applications take about 30 s to start and the JVM's JIT about "
                             "a minute to warm up, so shorter runs measure the warm-up)")
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS,
                        help=f"alternating rounds (default {MIN_ROUNDS}; fewer make a trial, and the record says so)")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--scenario", choices=("abs-overhead", "restore", "scale", "batch-sizing", "alignment", "soak",
                                               "stages", "upload-cpu", "kafka", "upgrade", "lake-commit", "freshness",
                                               "checkpoint-cost", "nexmark"),
                        default="abs-overhead",
                        help="abs-overhead: throughput per checkpoint mode; restore: restore + first batch time; "
                             "scale: bookkeeping cost per source partition (no Spark); "
                             "batch-sizing: checkpoint completion over a 20 M backlog with/without "
                             "trigger.target_batch_duration; alignment: skewed generator with alignment off/on; "
                             "soak: --checkpoints checkpoints every 0.1 s with retention, store/memory/fds/threads; "
                             "stages: three stages, one slow channel partition, aligned vs unaligned (--seconds "
                             "per mode); upload-cpu: CPU per MB of hashing and uploading checkpoint files to the "
                             "--store s3:// endpoint, piece by piece (no Spark); kafka: Kafka -> keyed totals as 1, 2 "
                             "and 3 stages beside the raw client ceiling, and side by side with Spark's connector, "
                             "plain Spark and Flink SQL on the same topic (bench/kafka_source.py); upgrade: --keys "
                             "keys of running totals in RocksDB, stop --savepoint, upgrade 4 -> 16 -> 4 shuffle "
                             "partitions with the canary, state query and diff, the final totals checked against a "
                             "run never upgraded (bench/upgrade.py); lake-commit: what an Iceberg and a Delta sink add "
                             "per checkpoint on the driver, --checkpoints of them (no Spark, bench/lake_commit.py); "
                             "freshness: Kafka -> each --sink at --rate records/s in total for --seconds, the run's "
                             "freshness per checkpoint beside an independent reader's (bench/freshness.py); "
                             "checkpoint-cost: --job with 1 s checkpoints against the same job without, "
                             "alternating rounds, with Spark's per-batch durations of barrier batches against the "
                             "others (bench/checkpoint_cost.py); nexmark: Nexmark q0, q1, q2, q5, q7, q8 on "
                             "barrierflow and Flink SQL on one Kafka topic, alternating per round (--events, --queries,"
                             " --engines; bench/nexmark/)")
    parser.add_argument("--sink", choices=("parquet", "kafka", "postgres"), nargs="+", default=["parquet"],
                        help="freshness scenario: the sinks to measure, one after the other")
    parser.add_argument("--warm-up", type=_seconds_at_least_zero, default=None, dest="warm_up",
                        help="freshness scenario: seconds each run goes before its checkpoints are measured "
                             "(default 20; 0: all but the first completed checkpoint)")
    parser.add_argument("--job", choices=("reference", "kafka"), default="reference",
                        help="checkpoint-cost scenario: the reference job (generator, --seconds per run) or the "
                             "Kafka JSON job (Spark's connector, the JVM JSON decoder, --records read to the end)")
    parser.add_argument("--aa", action="store_true",
                        help="checkpoint-cost scenario: an A/A control, the run without checkpoints once more in "
                             "each round")
    parser.add_argument("--jfr", metavar="DIR",
                        help="checkpoint-cost scenario: a Java Flight Recorder recording of the driver JVM per "
                             "measured run in DIR, and the modes' execution samples side by side in the record")
    parser.add_argument("--records", type=int, default=8_000_000,
                        help="checkpoint-cost scenario, Kafka job: records in the topic")
    parser.add_argument("--rate", type=float, default=20_000.0,
                        help="stages scenario: records/s per source partition; freshness scenario: records/s "
                             "in total")
    parser.add_argument("--processes", action="store_true",
                        help="stages scenario: every stage in a process of its own (as run --processes)")
    parser.add_argument("--partitions", type=int, nargs="+", default=[100, 1_000, 10_000],
                        help="scale scenario: the source partition counts to measure")
    parser.add_argument("--keys", type=int, default=None,
                        help=f"restore and upgrade scenarios: distinct keys in the state (default "
                             f"{RESTORE_KEYS:,}; the upgrade scenario {UPGRADE_KEYS:,}: about 100 MB of state)")
    parser.add_argument("--checkpoints", type=int, default=1000,
                        help="soak and lake-commit scenarios: checkpoints to run")
    parser.add_argument("--state-store", choices=("hdfs", "rocksdb"), nargs="+", default=["hdfs"],
                        help="restore scenario: the state store providers to measure, alternating per round "
                             "(spark.state_store)")
    parser.add_argument("--store", metavar="URI",
                        help="abs-overhead scenario: the checkpoint store, e.g. s3://bucket/prefix (endpoint and "
                             "credentials from the standard AWS variables); default a local directory")
    parser.add_argument("--store-bandwidth", type=float, nargs="+", metavar="MB_PER_S",
                        help="abs-overhead scenario with an s3:// --store: reach the store through a link limited to "
                             "these MB/s (one ABS and one synchronous mode per value), to emulate a remote store")
    parser.add_argument("--state-keys", type=int,
                        help="abs-overhead scenario: distinct keys of the state (default the spec's), so that each "
                             "checkpoint's upload is large")
    parser.add_argument("--interleave", type=float, metavar="SECONDS",
                        help="abs-overhead scenario: run each round as one query whose mode changes every SECONDS "
                             "(segments from commit to commit, each checkpointing segment ending after its last "
                             "checkpoint completed), so every mode shares one JVM; default one query per mode and "
                             "round")
    parser.add_argument("--upload-mb", type=float, default=40.0,
                        help="upload-cpu scenario: megabytes uploaded per step and round")
    parser.add_argument("--server-pid", type=int, metavar="PID",
                        help="upload-cpu scenario: the S3 endpoint's process on this machine (e.g. moto), whose CPU "
                             "is counted too")
    parser.add_argument("--systems", action="store_true",
                        help="kafka scenario: only the side by side (barrierflow with its Python reader and with "
                             "Spark's connector, plain Spark, Flink SQL on the same topic), without the read ceilings, "
                             "the generator and the stage runs")
    parser.add_argument("--text", choices=("plain", "realistic"), default="plain",
                        help="kafka scenario: the records, plain (ASCII key, value, event_time) or realistic (names, "
                             "URLs, comments besides, about 30 %% with non-ASCII text; bench/json_records.py)")
    parser.add_argument("--events", type=int, default=None,
                        help="nexmark scenario: Nexmark events in the topic (default 4,000,000)")
    parser.add_argument("--queries", default=None,
                        help="nexmark scenario: the queries to run, comma separated (default q0,q1,q2,q5,q7,q8)")
    parser.add_argument("--engines", default=None,
                        help="nexmark scenario: barrierflow, flink and/or spark (plain Spark running "
                             "barrierflow's transformation), comma separated (default all three)")
    parser.add_argument("--compare", choices=("flink-sql",),
                        help="instead of a scenario: the reference job on barrierflow and on Flink SQL side by side, "
                             "without and with 1 s checkpoints, alternating (needs `make flink`)")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the benchmark that ``args`` names; return the exit code (0, or 1 when a soak found a problem).
    Raises :class:`UserInputError` for options that do not fit together."""
    args.seconds = seconds_per_mode(args.seconds, args.scenario, args.compare)
    if args.keys is None:
        args.keys = UPGRADE_KEYS if args.scenario == "upgrade" else RESTORE_KEYS
    if args.rounds < 1 or args.seconds <= 0 or args.keys < 1:
        raise UserInputError(f"bench needs --rounds >= 1, --seconds > 0 and --keys >= 1 (got --rounds {args.rounds}, "
                             f"--seconds {args.seconds}, --keys {args.keys})")
    if args.compare and args.scenario != "abs-overhead":
        raise UserInputError(f"--compare {args.compare} runs its own job; drop --scenario {args.scenario}")
    if args.interleave is not None and (args.scenario != "abs-overhead" or args.compare):
        raise UserInputError("--interleave applies to --scenario abs-overhead only; drop it")
    if args.processes and (args.scenario != "stages" or args.compare):
        raise UserInputError("--processes applies to --scenario stages only; drop it")
    if args.systems and (args.scenario != "kafka" or args.compare):
        raise UserInputError("--systems applies to --scenario kafka only; drop it")
    if args.text != "plain" and (args.scenario != "kafka" or args.compare):
        raise UserInputError("--text applies to --scenario kafka only; drop it")
    if args.scenario != "checkpoint-cost" and args.job != "reference":
        raise UserInputError("--job applies to --scenario checkpoint-cost only; drop it")
    if args.scenario != "checkpoint-cost" and (args.aa or args.jfr):
        raise UserInputError("--aa and --jfr apply to --scenario checkpoint-cost only; drop them")
    nexmark_options = [o for o, v in (("--events", args.events), ("--queries", args.queries),
                                      ("--engines", args.engines)) if v is not None]
    if nexmark_options and (args.scenario != "nexmark" or args.compare):
        raise UserInputError(f"{', '.join(nexmark_options)} apply to --scenario nexmark only; drop them")
    if args.compare == "flink-sql":
        from bench.flink_compare import run_flink_comparison

        run_flink_comparison(args.spec, seconds=args.seconds, rounds=args.rounds, markdown=args.markdown,
                             command=_command(args))
        return EXIT_OK
    if args.scenario == "scale":
        from bench.scale import run_scale_benchmark

        run_scale_benchmark(tuple(args.partitions), checkpoints=max(2, args.rounds), markdown=args.markdown,
                            command=_command(args))
        return EXIT_OK
    if args.scenario == "restore":
        from bench.restore_time import run_restore_benchmark

        run_restore_benchmark(args.spec, keys=args.keys, rounds=args.rounds, markdown=args.markdown,
                              state_stores=tuple(dict.fromkeys(args.state_store)), command=_command(args))
        return EXIT_OK
    if args.scenario == "upgrade":
        from bench.upgrade import run_upgrade_benchmark

        run_upgrade_benchmark(args.spec, keys=args.keys, markdown=args.markdown, command=_command(args))
        return EXIT_OK
    if args.scenario == "soak":
        from bench.soak import run_soak_benchmark

        if args.checkpoints < 20:
            raise UserInputError(f"bench --scenario soak needs --checkpoints >= 20 (got {args.checkpoints})")
        report = run_soak_benchmark(args.spec, checkpoints=args.checkpoints,
                                    sample_every=max(10, args.checkpoints // 10), markdown=args.markdown,
                                    command=_command(args))
        return EXIT_OK if not report.problems() else EXIT_RUNTIME
    if args.scenario == "stages":
        from bench.stages import run_stages_benchmark

        if args.rate < 1:
            raise UserInputError("bench --scenario stages needs --rate >= 1 record/s per partition "
                                 f"(got {args.rate:g})")

        run_stages_benchmark(seconds=args.seconds, markdown=args.markdown, rate=args.rate, processes=args.processes,
                             command=_command(args))
        return EXIT_OK
    if args.scenario == "kafka":
        from bench.kafka_source import main as run_kafka_benchmark

        return run_kafka_benchmark([*(["--markdown", args.markdown] if args.markdown else []),
                                    *(["--systems"] if args.systems else []), "--text", args.text],
                                   command=_command(args))
    if args.scenario == "checkpoint-cost":
        from bench.checkpoint_cost import run_checkpoint_cost

        if args.records < 4:
            raise UserInputError(f"bench --records needs at least 4 records (got {args.records})")
        run_checkpoint_cost(args.job, rounds=args.rounds, seconds=args.seconds, spec_path=args.spec,
                            records=args.records, markdown=args.markdown, aa=args.aa, jfr_dir=args.jfr)
        return EXIT_OK
    if args.scenario == "nexmark":
        from bench.nexmark.queries import QUERIES
        from bench.nexmark.scenario import DEFAULT_EVENTS, ENGINES, run_nexmark_benchmark

        run_nexmark_benchmark(events=args.events if args.events is not None else DEFAULT_EVENTS,
                              seconds=args.seconds, rounds=args.rounds,
                              queries=_names(args.queries, tuple(QUERIES)), engines=_names(args.engines, ENGINES),
                              markdown=args.markdown, command=" ".join(["python -m bench", *getattr(args, "argv", [])]))
        return EXIT_OK
    if args.scenario == "freshness":
        from bench.freshness import WARM_UP, run_freshness_benchmark

        run_freshness_benchmark(args.seconds, args.rate, markdown=args.markdown, sinks=tuple(args.sink),
                                rounds=args.rounds, command=" ".join(["python -m bench", *getattr(args, "argv", [])]),
                                warm_up=WARM_UP if args.warm_up is None else args.warm_up)
        return EXIT_OK
    if args.scenario == "lake-commit":
        from bench.lake_commit import run_lake_commit_benchmark

        run_lake_commit_benchmark(args.checkpoints, markdown=args.markdown, command=_command(args))
        return EXIT_OK
    if args.scenario == "upload-cpu":
        from bench.upload_cpu import run_upload_cpu_benchmark

        run_upload_cpu_benchmark(args.store or "", upload_mb=args.upload_mb, rounds=args.rounds,
                                 bandwidth=args.store_bandwidth[0] if args.store_bandwidth else None,
                                 server_pid=args.server_pid, markdown=args.markdown, command=_command(args))
        return EXIT_OK
    if args.scenario in ("batch-sizing", "alignment"):
        from bench.event_time import run_event_time_benchmark

        run_event_time_benchmark(args.spec, args.scenario, seconds=args.seconds, rounds=args.rounds,
                                 markdown=args.markdown, command=_command(args))
        return EXIT_OK
    from bench.abs_overhead import run_benchmark

    if args.state_keys is not None and args.state_keys < 1:
        raise UserInputError(f"bench needs --state-keys >= 1 (got {args.state_keys})")
    if args.store is not None and not (args.store.startswith(("s3://", "file://")) and len(args.store) > 7):
        raise UserInputError(f"bench --store needs a storage URI such as s3://bucket/prefix or file:///abs/path "
                             f"(got {args.store!r})")
    if args.store_bandwidth is not None:
        if any(bw <= 0 for bw in args.store_bandwidth):
            raise UserInputError(f"bench --store-bandwidth needs positive MB/s values (got {args.store_bandwidth})")
        if not (args.store or "").startswith("s3://"):
            raise UserInputError("bench --store-bandwidth throttles the link to an S3 checkpoint store: give --store "
                                 "s3://bucket/prefix too (endpoint from AWS_ENDPOINT_URL_S3)")
    if args.interleave is not None and not 0 < args.interleave <= args.seconds:
        raise UserInputError(f"bench --interleave needs segments of more than 0 s and at most --seconds "
                             f"({args.seconds:g}); got {args.interleave:g}")
    run_benchmark(args.spec, seconds=args.seconds, rounds=args.rounds, markdown=args.markdown, store=args.store,
                  keys=args.state_keys, bandwidths=args.store_bandwidth, interleave=args.interleave,
                  command=_command(args))
    return EXIT_OK


def _command(args: argparse.Namespace) -> str:
    """The command line that ran (``python -m bench`` and its arguments), for a run's record."""
    return " ".join(["python -m bench", *(shlex.quote(a) for a in getattr(args, "argv", []))])


def _names(given: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated option's names, ``default`` when not given."""
    if given is None:
        return default
    return tuple(n.strip() for n in given.split(",") if n.strip())


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    try:
        args = build_parser().parse_args(list(argv) if argv is not None else None)
        args.argv = list(argv) if argv is not None else sys.argv[1:]
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("kafka.net.selector").setLevel(logging.ERROR)
    try:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not in the main thread (e.g. called from a test thread)
        pass
    try:
        return run(args)
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BarrierflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        print(f"interrupted at {datetime.now(UTC).isoformat(timespec='seconds')}", file=sys.stderr)
        return EXIT_RUNTIME
