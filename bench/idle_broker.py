"""What the embedded Kafka broker costs while it waits: core-seconds per minute of an idle broker,
as barrierflow starts it against the same broker with some settings changed, in alternating rounds.

    PYTHONPATH=include:. .venv/bin/python -m bench.idle_broker --with metadata.max.idle.interval.ms=500 \
        [--seconds 60] [--rounds 3]

Per round and variant (the order alternates each round): start the broker
(:func:`barrierflow.kafka_io.kraft_broker.kraft_broker`, a fresh data dir on 127.0.0.1), create
one topic of 4 partitions as a pipeline's first use does, let it settle for ``--settle`` seconds,
then read the broker JVM's CPU time (``/proc/<pid>/stat``: user + system) at the start and at the
end of ``--seconds`` of idling; the figure is core-seconds per minute of wall time. Printed: per
variant the median over the rounds (lowest-highest) and every round's; the record goes to
bench/results/embedded-broker/ (:mod:`bench.record`). A benchmark, not a test: nothing is
asserted. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence

from barrierflow.errors import UserInputError
from barrierflow.kafka_io.kraft_broker import SINGLE_NODE_SETTINGS, kraft_broker

from bench.proc_stat import process_ticks
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report
from bench.spread import median_spread, per_round

__all__ = ["RESULTS", "idle_cpu_per_minute", "main", "parse_settings", "render"]

RESULTS = RESULTS_ROOT / "embedded-broker"
TICKS = os.sysconf("SC_CLK_TCK")
AS_SHIPPED = "as shipped"


def _cpu_seconds(pid: int) -> float:
    return process_ticks(pid) / TICKS


def idle_cpu_per_minute(settings: Mapping[str, str], seconds: float, settle: float) -> float:
    """Core-seconds per minute the broker JVM used over ``seconds`` of idling, after one topic
    was created and ``settle`` seconds passed."""
    from kafka.admin import KafkaAdminClient, NewTopic

    with kraft_broker(settings=settings) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            admin.create_topics([NewTopic("idle", 4, 1)])
        finally:
            admin.close()
        time.sleep(settle)
        used, started = _cpu_seconds(broker.pid), time.monotonic()
        time.sleep(seconds)
        return (_cpu_seconds(broker.pid) - used) / (time.monotonic() - started) * 60.0


def parse_settings(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` broker properties.

    Raises:
        UserInputError: a pair has no ``=`` or an empty key.
    """
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--with takes KEY=VALUE broker properties, got {pair!r}")
        settings[key.strip()] = value.strip()
    return settings


def render(rounds: dict[str, list[float]], changed: Mapping[str, str]) -> list[str]:
    """The table: per variant the median core-s per minute (lowest-highest) and every round's."""
    shipped = ", ".join(f"`{k}={SINGLE_NODE_SETTINGS.get(k, 'Kafka default')}`" for k in changed)
    lines = [f"Idle broker, core-seconds per minute. {AS_SHIPPED}: {shipped}", "",
             "| broker | core-s per minute: median (lowest-highest) | per round |", "|---|---|---|"]
    for name, values in rounds.items():
        lines.append(f"| {name} | {median_spread(values, '.2f')} | {per_round(values)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_broker", description=__doc__.splitlines()[0])
    parser.add_argument("--with", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker property of the compared variant (repeat for several)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", help="write the record here instead of bench/results/embedded-broker/")
    args = parser.parse_args(argv)
    try:
        changed = parse_settings(args.changes)
        if not changed or args.rounds < 1 or args.seconds <= 0 or args.settle < 0:
            raise UserInputError("bench.idle_broker needs at least one --with KEY=VALUE, --rounds >= 1, "
                                 "--seconds > 0 and --settle >= 0")
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    record = RunRecord.start("idle-broker", command_line())
    variant = ", ".join(f"{k}={v}" for k, v in changed.items())
    variants = {AS_SHIPPED: {}, variant: changed}
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name in (list(variants) if r % 2 == 0 else list(reversed(variants))):
            rounds[name].append(idle_cpu_per_minute(variants[name], args.seconds, args.settle))
            print(f"round {r + 1} {name}: {rounds[name][-1]:.2f} core-s per minute", file=sys.stderr, flush=True)
    report(record, "The embedded broker idling", args.rounds, render(rounds, changed),
           {"seconds": args.seconds, "settle": args.settle, "changed": changed, "rounds": rounds},
           results_dir=RESULTS, suffix="idle", markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
