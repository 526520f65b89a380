"""The recorded ``barrierflow chaos`` runs of bench/results/chaos-runs.md: ``python -m bench.chaos_runs``.

Six pipelines, each put through ``barrierflow chaos`` with ``--kills N`` (the recorded runs use
at least 100 each):

=================  =========================================================================
``parquet``        generator -> 1 s event-time windows per key (append) -> Parquet (2PC)
``postgres``       the same -> PostgreSQL (prepared transactions)
``kafka``          the same -> Kafka (transactional producer, markers)
``stages``         three stages: two generators -> channels -> a stage reading both -> Parquet
``stages-procs``   the same with ``run --processes`` (kills of single stage processes too)
``cycle``          include/pipelines/cycle.yaml: a feedback loop, every record goes round once
=================  =========================================================================

The servers a pipeline needs are started here on 127.0.0.1 and stopped afterwards: a throwaway
PostgreSQL, an Apache Kafka broker (channels use the embedded broker ``barrierflow run``
starts itself). Drivers start with the test suite's short-lived-driver JVM options, as chaos
restarts them a hundred times. Each run prints chaos's summary; ``--markdown FILE`` appends one
table row per run (command, date, seed, summary) for bench/results/chaos-runs.md. At the end
(when a run raised: of the runs that finished) it prints what ran (command, commit, date, cores,
load average) and writes the record, ``YYYY-MM-DD-HHMM.md`` and ``.json`` with every run's
pipeline, chaos command, start, exit code, duration and verdict (:mod:`bench.record`), to
bench/results/chaos-runs/.

Sizing (see docs/chaos.md): a timed kill lands ``--min-gap``..``--max-gap`` seconds after a run
starts, and a driver takes several seconds to start, so each killed run gets through only a
little input; ``--records`` must leave input for the last run after N kills.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report
from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM, windowed_spec

ROOT = Path(__file__).resolve().parents[1]
#: Where each invocation's record goes (the runs before it are in bench/results/chaos-runs.md).
RESULTS = RESULTS_ROOT / "chaos-runs"
PIPELINES = ("parquet", "postgres", "kafka", "stages", "stages-procs", "cycle", "ttl")
#: The Kafka sink's default commit-marker topic (spec field ``commit_marker_topic``).
COMMIT_MARKERS = "__barrierflow_commits"


def windowed(run_dir: Path, name: str, sink: dict[str, Any], records: int) -> dict[str, Any]:
    """The windowed single-stage pipeline of the crash tests (:func:`tests.scenarios.harness.windowed_spec`)
    at ``records`` per partition, 500 records per partition and batch, 10 ms of event time between
    records, and 1 s checkpoints (the tests' 300 ms would spend a 100-kill run on checkpoints)."""
    data = yaml.safe_load(windowed_spec(run_dir, sink, records=records, per_batch=500,
                                        event_time_step_ms=10).read_text(encoding="utf-8"))
    data["name"] = name
    data["checkpoint"]["interval"] = "1s"
    return data


def from_example(run_dir: Path, example: str, name: str, records: int) -> dict[str, Any]:
    """include/pipelines/<example>.yaml with its paths under ``run_dir`` and every generator at
    ``records`` per partition (the second generator of ``stages`` at half, as in the example),
    a 100 ms trigger and 1 s checkpoints."""
    data = yaml.safe_load((ROOT / "include" / "pipelines" / f"{example}.yaml").read_text(encoding="utf-8"))
    data["name"], data["work_dir"] = name, str(run_dir / "work")
    data["checkpoint"]["storage"] = f"file://{run_dir / 'checkpoints'}"
    data["spark"]["conf"] = {**data["spark"].get("conf", {}), **FAST_JVM}
    data["trigger"] = {"interval": "100ms"}  # the demos' 500 ms leaves few checkpoints between kills
    data["checkpoint"]["interval"] = "1s"
    generators = [s for stage in data["stages"] for s in stage["sources"] if s.get("type") == "generator"]
    base = max(s["records_per_partition"] for s in generators)
    for stage in data["stages"]:
        for source in stage["sources"]:
            if source.get("type") == "generator":
                source["records_per_partition"] = records * source["records_per_partition"] // base
        for sink in stage["sinks"]:
            if sink.get("type") == "parquet":
                sink["path"] = f"file://{run_dir / 'output' / sink.get('name', stage['name'])}"
    return data


def ttl(run_dir: Path, name: str, records: int) -> dict[str, Any]:
    """bench/chaos_ttl.yaml (generator -> keyed running totals with an event-time ``ttl`` and
    ``emit_on_expiry`` -> Parquet; keys expiring all through the run) with its paths under
    ``run_dir`` and ``records`` per partition."""
    text = (ROOT / "bench" / "chaos_ttl.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text.replace("${TTL_CHAOS_RECORDS:-30000}", str(records)))
    data["name"], data["work_dir"] = name, str(run_dir / "work")
    data["checkpoint"]["storage"] = f"file://{run_dir / 'checkpoints'}"
    data["sinks"][0]["path"] = f"file://{run_dir / 'output'}"
    data["sources"][0]["records_per_partition"] = records
    return data


@contextlib.contextmanager
def prepared(pipeline: str, run_dir: Path, records: int) -> Iterator[tuple[Path, dict[str, str]]]:
    """Write the pipeline's spec under ``run_dir``, start the servers it needs; yields the spec
    path and the environment chaos must run with."""
    name = f"chaos-{pipeline}"
    env: dict[str, str] = {}
    run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        if pipeline == "parquet":
            data = windowed(run_dir, name, {"name": "out", "type": "parquet",
                                            "path": f"file://{run_dir / 'output'}"}, records)
        elif pipeline == "postgres":
            from tests.scenarios.postgres_output import create_window_table
            from tests.support.postgres_server import running_postgres

            endpoint = stack.enter_context(running_postgres())
            env["BARRIERFLOW_POSTGRES_DSN"] = endpoint.dsn
            data = windowed(run_dir, name, {"name": "pg", "type": "postgres",
                                            "table": create_window_table(endpoint.dsn)}, records)
        elif pipeline == "kafka":
            from tests.support.kafka_broker import create_topic, running_kafka_broker

            broker = stack.enter_context(running_kafka_broker())
            create_topic(broker, "windows", 2)
            create_topic(broker, COMMIT_MARKERS, 1)  # the sink's commit markers: it never creates topics
            data = windowed(run_dir, name, {"name": "k", "type": "kafka", "topic": "windows", "key_column": "key",
                                            "bootstrap_servers": broker.bootstrap_servers}, records)
        elif pipeline in ("stages", "stages-procs"):
            data = from_example(run_dir, "stages", name, records)
        elif pipeline == "cycle":
            data = from_example(run_dir, "cycle", name, records)
        elif pipeline == "ttl":
            data = ttl(run_dir, name, records)
        else:
            raise ValueError(f"unknown pipeline {pipeline!r}; one of {', '.join(PIPELINES)}")
        spec = run_dir / "pipeline.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        yield spec, env


def chaos_command(spec: Path, pipeline: str, args: argparse.Namespace, scratch: Path) -> list[str]:
    command = [str(Path(sys.executable).with_name("barrierflow")), "chaos", str(spec), "--kills", str(args.kills),
               "--seed", str(args.seed), "--mode", args.mode, "--min-gap", str(args.min_gap),
               "--max-gap", str(args.max_gap), "--point-share", str(args.point_share), "--scratch", str(scratch),
               "--json"]
    return [*command, "--processes"] if pipeline == "stages-procs" else command


def summary_line(report: dict[str, Any]) -> str:
    """One line of what chaos reported (the fields of its summary)."""
    kills = ", ".join(f"{k} {v}" for k, v in report.get("kills", {}).items() if v)
    verdict = "PASS" if report.get("passed") else f"FAIL ({report.get('problem') or 'rows differ'})"
    return (f"{verdict}: kills {report.get('kills_total')} ({kills}), restarts {report.get('restarts')}, "
            f"checkpoints {report.get('checkpoints')}, rows {report.get('rows')} of {report.get('rows_expected')}, "
            f"missing {report.get('missing')}, extra {report.get('extra')}, duplicated {report.get('duplicated')}, "
            f"{report.get('seconds', 0) / 60:.1f} min under kills "
            f"(reference {report.get('reference_seconds', 0):.0f} s)")


@dataclass(frozen=True)
class ChaosRun:
    """One pipeline's chaos run: its ``barrierflow chaos`` command (the run's directory shown as
    ``$RUN``), start (UTC), seed, exit code, minutes it took and chaos's verdict line."""

    pipeline: str
    command: str
    started: datetime
    seed: int
    exit_code: int
    minutes: float
    verdict: str

    def row(self) -> str:
        """The run as a table row: pipeline, command, start, seed, verdict."""
        return f"| {self.pipeline} | `{self.command}` | {self.started:%Y-%m-%d %H:%M} | {self.seed} | {self.verdict} |"


def record_runs(record: RunRecord, runs: Sequence[ChaosRun], *, kills: int,
                results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and one row per run and write the record (:func:`bench.record.report`)
    into ``results`` (None: no record) with every run's figures; returns the paths written."""
    lines = ["| pipeline | command | started (UTC) | seed | exit code | minutes | verdict |",
             "|---|---|---|---|---|---|---|",
             *(f"| {r.pipeline} | `{r.command}` | {r.started:%Y-%m-%d %H:%M} | {r.seed} | {r.exit_code} "
               f"| {r.minutes:.1f} | {r.verdict} |" for r in runs)]
    what = f"Chaos runs, --kills {kills}: {', '.join(r.pipeline for r in runs)}"
    return report(record, what, 1, lines, {"kills": kills, "runs": [asdict(r) for r in runs]}, results_dir=results)


def run_one(pipeline: str, args: argparse.Namespace) -> ChaosRun:
    """Prepare, run chaos, return what it did."""
    run_dir = (Path(args.dir) / f"{pipeline}-{datetime.now(UTC):%Y%m%dT%H%M%S}").resolve()
    started = datetime.now(UTC)
    with prepared(pipeline, run_dir, args.records) as (spec, env):
        command = chaos_command(spec, pipeline, args, run_dir / "scratch")
        print(f"[{started:%H:%M:%S}] {pipeline}: {' '.join(command)}", flush=True)
        begin = time.monotonic()
        done = subprocess.run(command, env={**os.environ, **short_lived_driver_env(), **env}, cwd=ROOT,
                              capture_output=True, text=True, check=False)
    try:
        report = json.loads(done.stdout)
        line = summary_line(report)
    except json.JSONDecodeError:
        errors = [text for text in done.stderr.splitlines() if text.startswith(("error:", "barrierflow:"))]
        line = f"no report (exit {done.returncode}): {(errors or done.stderr.strip().splitlines() or [''])[0][:600]}"
    minutes = (time.monotonic() - begin) / 60
    print(f"{pipeline}: exit {done.returncode} after {minutes:.1f} min: {line}", flush=True)
    shown = " ".join(["barrierflow", *command[1:]]).replace(str(run_dir), "$RUN")
    return ChaosRun(pipeline, shown, started, args.seed, done.returncode, minutes, line)


def main(argv: Sequence[str] | None = None, results: Path | None = RESULTS) -> int:
    """Run chaos on each pipeline ``argv`` names (default the command line's), one after the
    other; the record goes into ``results`` (None: no record). Returns the worst exit code."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos_runs", description=__doc__.split("\n")[0])
    parser.add_argument("pipelines", nargs="+", choices=PIPELINES)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--records", type=int, default=60_000, help="records per generator partition")
    parser.add_argument("--min-gap", type=float, default=4.0)
    parser.add_argument("--max-gap", type=float, default=14.0)
    parser.add_argument("--point-share", type=float, default=0.25)
    parser.add_argument("--mode", choices=["group", "stage", "jvm", "mixed"], default="mixed")
    parser.add_argument("--dir", default="var/chaos-runs", help="where runs keep specs, scratch copies and logs")
    parser.add_argument("--markdown", help="append one table row per run to this file")
    args = parser.parse_args(argv)
    record = RunRecord.start("chaos-runs", command_line() if argv is None else " ".join(
        ["python -m bench.chaos_runs", *(shlex.quote(a) for a in argv)]))
    runs: list[ChaosRun] = []
    try:
        for pipeline in args.pipelines:
            runs.append(run_one(pipeline, args))
            if args.markdown:
                with open(args.markdown, "a", encoding="utf-8") as out:
                    out.write(runs[-1].row() + "\n")
    finally:
        if runs:  # what finished, also when a later run raised
            record_runs(record, runs, kills=args.kills, results=results)
    return max((r.exit_code for r in runs), default=0)


if __name__ == "__main__":
    sys.exit(main())
