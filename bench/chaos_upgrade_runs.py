"""The recorded upgrade-mode ``barrierflow chaos`` runs (bench/results/chaos-runs.md):
``python -m bench.chaos_upgrade_runs``.

Writes the keyed running-totals pipeline (generator, 2 partitions, ``--keys`` keys -> count and
sum per key, update mode, RocksDB state -> Parquet through 2PC, an expectation suite bounding
every count) at 4 shuffle partitions, and a changed spec of it, then runs
``barrierflow chaos OLD --upgrade-to NEW`` with the chaos options given (``--kills N`` and the like):

* ``rescale``: NEW is the same pipeline at 8 shuffle partitions (the upgrade rewrites the state
  and its canary passes; the next upgrade rescales back);
* ``broken``: NEW counts every record of key 0 a thousand times
  (tests/verification/state_transforms.py): its canary fails deep verification and rolls back;
* ``staged-rescale``: the same job as a pipeline of two stages: ``totals`` (the generator ->
  the running totals, RocksDB state, 4 shuffle partitions -> channel ``c`` on the embedded
  broker) and ``out`` (channel ``c`` -> Parquet); NEW rescales only ``totals`` to 8
  (``stages[].shuffle_partitions``) while ``out`` keeps its state as it is.

Drivers start with the test suite's short-lived-driver JVM options. Chaos's JSON report goes to
``<run dir>/<case>.json``. At the end it prints what ran (command, commit, date, cores, load
average) above the run's figures and writes the record, ``YYYY-MM-DD-HHMM-<case>.md`` and
``.json`` with the case, its sizes, the chaos command, its exit code and chaos's whole report
(:mod:`bench.record`), to bench/results/chaos-upgrade-runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.chaos_runs import summary_line
from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report
from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = "barrierflow.transforms.aggregations:keyed_running_totals"
POISONED = "tests.verification.state_transforms:totals_with_a_poisoned_key"
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "chaos-upgrade-runs"
#: The figures of chaos's report the table shows (the record keeps the whole report).
SHOWN = ("passed", "problem", "kills", "kills_by_step", "kills_by_point", "upgrades", "runs", "rows_expected",
         "rows", "missing", "extra", "duplicated", "seconds", "reference_seconds")


def spec(run_dir: Path, file: str, *, records: int, keys: int, per_batch: int, shuffle: int, function: str) -> Path:
    suite = run_dir / "suite.json"
    suite.write_text(json.dumps({"name": "totals", "expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "min_value": 1, "max_value": 2 * records}}]}))
    data: dict[str, Any] = {
        "version": 1, "name": "upgrade-chaos", "work_dir": str(run_dir / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": per_batch, "records_per_partition": records, "keys": keys}],
        "transformation": {"function": function, "output_mode": "update"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{run_dir / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{run_dir / 'checkpoints'}", "interval": "500ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": shuffle, "state_store": "rocksdb", "conf": FAST_JVM},
        "verification": {"expectations": str(suite)},
    }
    path = run_dir / file
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def staged_spec(run_dir: Path, file: str, *, records: int, keys: int, per_batch: int, shuffle: int) -> Path:
    """:func:`spec`'s job as two stages: ``totals`` (the generator -> the running totals, RocksDB
    state, ``shuffle`` shuffle partitions -> channel ``c`` on the embedded broker) and ``out``
    (channel ``c`` -> the update rows as they are -> Parquet). The stage with state reads the
    generator, whose batches are the same in every run, so its update rows are too (chaos refuses
    an update-mode stage reading a channel: its batches depend on the writing stage's progress)."""
    single = yaml.safe_load(spec(run_dir, file, records=records, keys=keys, per_batch=per_batch, shuffle=4,
                                 function=HEALTHY).read_text(encoding="utf-8"))
    totals = {"key": "long", "count": "long", "value_sum": "long"}
    data: dict[str, Any] = {
        "version": 1, "name": single["name"], "work_dir": single["work_dir"],
        "channels": [{"name": "c", "partitions": 2, "bootstrap": "embedded"}],
        "stages": [
            {"name": "totals", "shuffle_partitions": shuffle, "sources": single["sources"],
             "transformation": single["transformation"], "sinks": [{"type": "channel", "channel": "c"}]},
            {"name": "out",
             "sources": [{"type": "channel", "channel": "c", "max_records_per_batch": 2 * per_batch,
                          "json_fields": totals}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {name: name for name in totals}}},
             "sinks": single["sinks"]},
        ],
        "trigger": single["trigger"], "checkpoint": single["checkpoint"], "spark": single["spark"],
        "verification": single["verification"],
    }
    path = run_dir / file
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_chaos(command: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the chaos ``command`` with ``env``, its output captured as text."""
    return subprocess.run(list(command), env=dict(env), capture_output=True, text=True, check=False)


def report_lines(case: str, command: str, exit_code: int, chaos: Mapping[str, Any] | None) -> list[str]:
    """The run's figures: the command, chaos's verdict line (:func:`bench.chaos_runs.summary_line`)
    and the figures of :data:`SHOWN` as a table (``upgrades``: their count by outcome); without a
    report (``chaos`` None), the exit code alone."""
    lines = [f"Case {case}: `{command}`, exit code {exit_code}", ""]
    if chaos is None:
        return [*lines, "no report: chaos printed no JSON"]
    lines += [summary_line(dict(chaos)), "", "| figure | value |", "|---|---|"]
    for key in SHOWN:
        value = chaos.get(key)
        if key == "upgrades" and isinstance(value, list):
            outcomes: dict[str, int] = {}
            for upgrade in value:
                outcome = str(upgrade.get("outcome", "unfinished")) if isinstance(upgrade, Mapping) else "?"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            value = f"{len(value)} ({', '.join(f'{o} {n}' for o, n in sorted(outcomes.items())) or 'none'})"
        elif isinstance(value, Mapping | list):
            value = json.dumps(value)
        lines.append(f"| {key.replace('_', ' ')} | {value} |")
    return lines


def record_run(record: RunRecord, case: str, command: str, exit_code: int, chaos: Mapping[str, Any] | None, *,
               sizes: Mapping[str, int], chaos_options: Sequence[str],
               results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and the run's figures (:func:`report_lines`) and write the record
    (:func:`bench.record.report`, one round, suffix ``case``) into ``results`` (None: no record)
    with the case, its sizes, the chaos options and command, the exit code and chaos's whole
    report (None when it printed none; ``passed`` is chaos's verdict, None without a report);
    returns the paths written."""
    figures = {"case": case, **sizes, "chaos_options": list(chaos_options), "chaos_command": command,
               "exit_code": exit_code, "passed": bool(chaos.get("passed")) if chaos is not None else None,
               "report": None if chaos is None else dict(chaos)}
    verdict = "no report" if chaos is None else "PASSED" if figures["passed"] else "FAILED"
    return report(record, f"Upgrade-mode chaos run, case {case}: {verdict}", 1,
                  report_lines(case, command, exit_code, chaos), figures, results_dir=results, suffix=case)


def main(argv: list[str] | None = None, results: Path | None = RESULTS) -> int:
    """Run the case ``argv`` names (default the command line's; the options chaos does not know
    of here go to ``barrierflow chaos``); the record goes into ``results`` (None: no record).
    Returns chaos's exit code (1 when it printed no report and exited 0)."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos_upgrade_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=["rescale", "broken", "staged-rescale"])
    parser.add_argument("--records", type=int, default=2000, help="records per generator partition")
    parser.add_argument("--keys", type=int, default=7)
    parser.add_argument("--per-batch", type=int, default=40)
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "bench-chaos-upgrade")
    args, chaos_options = parser.parse_known_args(argv)  # the rest: barrierflow chaos options (--kills ...)
    record = RunRecord.start("chaos-upgrade-runs", command_line() if argv is None else " ".join(
        ["python -m bench.chaos_upgrade_runs", *(shlex.quote(a) for a in argv)]))
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    run_dir = (args.dir / f"{args.case}-{stamp}").resolve()
    run_dir.mkdir(parents=True)
    sizes = {"records": args.records, "keys": args.keys, "per_batch": args.per_batch}
    if args.case == "staged-rescale":
        old = staged_spec(run_dir, "old.yaml", shuffle=4, **sizes)
        new = staged_spec(run_dir, "new.yaml", shuffle=8, **sizes)
    else:
        old = spec(run_dir, "old.yaml", shuffle=4, function=HEALTHY, **sizes)
        new = (spec(run_dir, "new.yaml", shuffle=8, function=HEALTHY, **sizes) if args.case == "rescale"
               else spec(run_dir, "new.yaml", shuffle=4, function=POISONED, **sizes))
    options = [a for a in chaos_options if a != "--"]
    command = [sys.executable, "-m", "barrierflow.cli.main", "chaos", str(old), "--upgrade-to", str(new),
               "--scratch", str(run_dir / "scratch"), "--json", *options]
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {' '.join(command)}", flush=True)
    env = {**os.environ, **short_lived_driver_env()}
    done = run_chaos(command, env)
    (run_dir / f"{args.case}.json").write_text(done.stdout, encoding="utf-8")
    sys.stderr.write(done.stderr[-5000:])
    try:
        chaos = json.loads(done.stdout)
    except json.JSONDecodeError:
        chaos = None
    shown = " ".join(["barrierflow", *command[3:]]).replace(str(run_dir), "$RUN")
    record_run(record, args.case, shown, done.returncode, chaos if isinstance(chaos, dict) else None, sizes=sizes,
               chaos_options=options, results=results)
    if not isinstance(chaos, dict):
        return done.returncode or 1
    return done.returncode

if __name__ == "__main__":
    sys.exit(main())
