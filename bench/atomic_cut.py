"""Torn-cut chaos runs of the atomic Iceberg mode, two kinds:

* ``python -m bench.atomic_cut --pipeline SPEC --kills 20 [--url URL]``: a real pipeline (Spark)
  under ``barrierflow chaos`` while an independent reader polls the catalog
  (:mod:`bench.atomic_cut_pipeline`; the run bench/results/chaos-runs.md records as the acceptance run);
* ``python -m bench.atomic_cut --url URL --kills 20``: the sinks alone, driven without Spark by
  a driver process that is killed (below); cheap, many checkpoints per minute, the harness the
  suite runs small.

The driver-only run:
Two atomic Iceberg sinks (stage ``s1`` sink ``a`` -> ``lake.a``, stage ``s2`` sink ``b`` ->
``lake.b``, each stage with its own checkpoint store) in one PostgreSQL catalog are driven
through their real entry points by a driver process (:func:`drive`), the way a two-stage
pipeline's coordinator drives its final stages (no Spark: the epochs' rows are written ahead as
the executors write them): per checkpoint n, each stage's rows are written ahead, both sinks
pre-commit, the checkpoint is recorded complete (``completed/<n>``, the global manifest's
stand-in), then both sinks commit on two threads at once (each stage's sink thread). Every
fifth epoch of ``b`` has no rows. A start restores both sinks from the newest completed
checkpoint, as a restore of the pipeline does, one stage after the other.

The driver is SIGKILLed ``--kills`` times: at a random moment after its restore, or (every
fourth kill) by the crash point between ``PREPARE TRANSACTION`` and ``COMMIT PREPARED``. Meanwhile a reader that
knows nothing of barrierflow (:mod:`bench.atomic_cut_reader`) polls the catalog until the run
ended and it made at least ``--min-polls`` reads, counting torn reads. At the end both tables
are scanned with pyiceberg and compared with the rows of the completed checkpoints (computed
from the checkpoint numbers, not read from barrierflow): missing, extra and duplicated rows.

Either kind prints what it ran (command, commit, date, cores, load average) above its figures and
writes the record, ``YYYY-MM-DD-HHMM-sinks.md`` or ``YYYY-MM-DD-HHMM-pipeline.md`` and ``.json``
with every figure (the pipeline run's with chaos's whole report) (:mod:`bench.record`), to
bench/results/atomic-cut/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.record import RESULTS as RESULTS_ROOT
from bench.record import RunRecord, command_line, report

SINKS = (("s1", "a"), ("s2", "b"))
NAMESPACE = "lake"
#: Where each run's record goes.
RESULTS = RESULTS_ROOT / "atomic-cut"


def rows_of(sink: str, checkpoint: int) -> list[int]:
    """The keys sink ``sink`` writes in epoch ``checkpoint`` (``b``: none every fifth epoch)."""
    if sink == "b" and checkpoint % 5 == 0:
        return []
    base = checkpoint * 100 + (0 if sink == "a" else 50)
    return [base + i for i in range(3)]


def make_sinks(work: Path, url: str, catalog: str, attempt: int) -> list[Any]:
    from barrierflow.sinks.cut import CutLog
    from barrierflow.sinks.iceberg_atomic import AtomicIcebergSink
    from barrierflow.spec.lakehouse import IcebergCatalogSpec, IcebergSinkSpec
    from barrierflow.storage.local import LocalObjectStore
    from barrierflow.transactions.ledger import TransactionLedger

    catalog_spec = IcebergCatalogSpec(name=catalog, uri=url, warehouse=f"file://{work / 'warehouse'}", atomic=True)
    sinks = []
    for stage, name in SINKS:
        store = LocalObjectStore(work / f"store-{stage}")
        spec = IcebergSinkSpec(type="iceberg", name=name, table=f"{NAMESPACE}.{name}", catalog=catalog_spec)
        sinks.append(AtomicIcebergSink(spec=spec, work_dir=work / "work", name=name, pipeline="atomicp",
                                       ledger=TransactionLedger(store, "atomicp"), attempt=attempt, stage=stage,
                                       pipeline_name="atomicp", cuts=CutLog(store)))
    return sinks


def completed(work: Path) -> list[int]:
    folder = work / "completed"
    return sorted(int(p.name) for p in folder.iterdir()) if folder.exists() else []


def drive(work: Path, url: str, catalog: str, *, checkpoints: int | None) -> None:
    """Restore from the newest completed checkpoint, then run ``checkpoints`` more (None: until killed)."""
    from barrierflow.testing import write_ahead_batch

    attempt_file = work / "attempt"
    attempt = int(attempt_file.read_text()) + 1 if attempt_file.exists() else 0
    attempt_file.write_text(str(attempt))
    sinks = make_sinks(work, url, catalog, attempt)
    done = completed(work)
    latest = done[-1] if done else None
    for sink in sinks:
        sink.restore(latest, latest)
    (work / f"restored-{attempt}").write_text(str(latest))
    used = [t.checkpoint_id for sink in sinks for t in sink.ledger.list(sink.name)]
    n = max([*used, *(done or [0])], default=0)
    (work / "completed").mkdir(exist_ok=True)
    ran = 0
    while checkpoints is None or ran < checkpoints:
        n += 1
        ran += 1
        for sink in sinks:
            keys = rows_of(sink.name, n)
            write_ahead_batch(sink.write_ahead.uri, n, pa.table({"key": pa.array(keys, pa.int64())}))
            sink.pre_commit_epoch(n, n)
        marker = work / "completed" / f".{n}.tmp"
        marker.write_text("")
        marker.rename(work / "completed" / str(n))
        errors: list[BaseException] = []
        threads = [threading.Thread(target=_commit, args=(sink, n, errors)) for sink in sinks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


def _commit(sink: Any, checkpoint: int, errors: list[BaseException]) -> None:
    """Commit ``checkpoint`` in ``sink`` (a stage's sink thread); an error goes to ``errors``."""
    try:
        sink.notify_checkpoint_complete(checkpoint, checkpoint)
    except BaseException as exc:  # reported by the caller: the run fails
        errors.append(exc)


def scan(url: str, catalog: str, work: Path) -> dict[str, Counter[int]]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog(catalog, uri=url, warehouse=f"file://{work / 'warehouse'}")
    out = {}
    for _stage, name in SINKS:
        table = cat.load_table(f"{NAMESPACE}.{name}")
        out[name] = Counter(table.scan().to_arrow().column("key").to_pylist())
    return out


def run(url: str, work: Path, *, kills: int, min_polls: int, seed: int, catalog: str,
        max_delay: float = 4.0, prepare_every: int = 4) -> dict[str, Any]:
    """The chaos run (module docstring); returns its result."""
    from barrierflow.sinks.iceberg_atomic import libpq_params

    from bench.atomic_cut_reader import CatalogReader, torn

    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base = [sys.executable, "-m", "bench.atomic_cut", "drive", "--url", url, "--work", str(work),
            "--catalog", catalog]
    stop = threading.Event()
    stats = {"polls": 0, "torn": 0, "examples": [], "cuts_seen": set()}

    def poll() -> None:
        reader = CatalogReader(libpq_params(url), catalog, NAMESPACE)
        try:
            while not stop.is_set() or stats["polls"] < min_polls:
                read = reader.read()
                stats["polls"] += 1
                if torn(read):
                    stats["torn"] += 1
                    if len(stats["examples"]) < 5:
                        stats["examples"].append(read)
                stats["cuts_seen"].update(c for c in read.values() if c is not None)
        finally:
            reader.close()

    # the first start creates the tables, so the reader has a catalog to read
    subprocess.run([*base, "--checkpoints", "1"], env=env, check=True, timeout=300)
    reader_thread = threading.Thread(target=poll, daemon=True)
    reader_thread.start()
    kinds: Counter[str] = Counter()
    for kill in range(kills):
        at_prepare = kill % prepare_every == prepare_every - 1
        attempt = int((work / "attempt").read_text()) + 1
        proc = subprocess.Popen(base, env={**env, "BARRIERFLOW_CRASH_AT": f"iceberg_atomic_prepared@{1 + kill % 3}"}
                                if at_prepare else env, stderr=subprocess.PIPE, text=True)
        if at_prepare:
            _, err = proc.communicate(timeout=300)
            if proc.returncode != -signal.SIGKILL:
                raise RuntimeError(f"the driver did not die at the crash point (exit {proc.returncode}): {err[-2000:]}")
            kinds["between PREPARE and COMMIT PREPARED"] += 1
        else:
            while not (work / f"restored-{attempt}").exists() and proc.poll() is None:  # its restore finished
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, max_delay))  # a kill at a random moment: the chaos, not a wait for readiness
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
            if proc.returncode != -signal.SIGKILL:
                raise RuntimeError(f"the driver exited by itself (exit {proc.returncode}) before kill {kill + 1}")
            kinds["random moment"] += 1
    subprocess.run([*base, "--checkpoints", "2"], env=env, check=True, timeout=300)  # restore, two clean checkpoints
    stop.set()
    reader_thread.join()
    tables = scan(url, catalog, work)
    done = completed(work)
    result: dict[str, Any] = {"kills": dict(kinds), "completed_checkpoints": len(done), "polls": stats["polls"],
                              "torn_reads": stats["torn"], "torn_examples": stats["examples"],
                              "distinct_checkpoints_seen_by_reader": len(stats["cuts_seen"])}
    for _stage, name in SINKS:
        expected = Counter(k for cid in done for k in rows_of(name, cid))
        got = tables[name]
        result[name] = {"expected_rows": sum(expected.values()), "rows": sum(got.values()),
                        "missing": sum((expected - got).values()), "extra": sum((got - expected).values()),
                        "duplicated": sum(c - 1 for c in got.values() if c > 1)}
    with psycopg_connect(url) as conn:
        result["prepared_left"] = conn.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'bf-atomic.%'"
                                               ).fetchone()[0]
    result["passed"] = (result["torn_reads"] == 0 and result["prepared_left"] == 0 and all(
        result[name][k] == 0 for _s, name in SINKS for k in ("missing", "extra", "duplicated")))
    return result


def psycopg_connect(url: str) -> Any:
    import psycopg
    from barrierflow.sinks.iceberg_atomic import libpq_params

    return psycopg.connect(autocommit=True, **libpq_params(url))


def _cell(value: Any) -> str:
    """A figure as a table cell: a mapping or a list as compact JSON, anything else as ``str``."""
    return json.dumps(value, default=str) if isinstance(value, Mapping | list | tuple) else str(value)


def sinks_lines(result: Mapping[str, Any]) -> list[str]:
    """The driver-only run's figures (:func:`run`'s result) as two tables: the run's, and per sink
    the rows expected and found."""
    head = ("kills", "completed_checkpoints", "polls", "torn_reads", "distinct_checkpoints_seen_by_reader",
            "prepared_left", "passed")
    lines = ["| " + " | ".join(name.replace("_", " ") for name in head) + " |", "|" + "---|" * len(head),
             "| " + " | ".join(_cell(result.get(name)) for name in head) + " |", "",
             "| sink | expected rows | rows | missing | extra | duplicated |", "|---|---:|---:|---:|---:|---:|"]
    for _stage, name in SINKS:
        rows = result.get(name) or {}
        lines.append(f"| {name} | " + " | ".join(_cell(rows.get(k)) for k in ("expected_rows", "rows", "missing",
                                                                                "extra", "duplicated")) + " |")
    return lines


def record_sinks_run(record: RunRecord, result: Mapping[str, Any], *, kills: int, seed: int, min_polls: int,
                     results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and the driver-only run's figures (:func:`sinks_lines`) and write the record
    (:func:`bench.record.report`, one round, suffix ``sinks``) into ``results`` (None: no record)
    with the options and every figure of :func:`run`'s result; returns the paths written."""
    figures = {"kind": "sinks", "kills": kills, "seed": seed, "min_polls": min_polls, "result": dict(result)}
    verdict = "PASSED" if result.get("passed") else "FAILED"
    return report(record, f"Torn-cut chaos run of the atomic Iceberg sinks alone, --kills {kills}: {verdict}", 1,
                  sinks_lines(result), figures, results_dir=results, suffix="sinks")


def pipeline_lines(summary: Sequence[str], figures: Mapping[str, Any]) -> list[str]:
    """The pipeline run's report: chaos's summary (as a block), the reader's and the verdict's
    figures as a table (``figure | value``), and the problems."""
    lines = [*(f"    {line}" for line in summary), "", "| figure | value |", "|---|---|"]
    lines += [f"| {name.replace('_', ' ')} | {_cell(value)} |" for name, value in figures.items()
              if name not in ("problems", "torn_examples", "last_read")]
    return [*lines, "", f"problems: {'; '.join(figures.get('problems') or []) or 'none'}"]


def record_pipeline_run(record: RunRecord, spec: Path, summary: Sequence[str], figures: Mapping[str, Any],
                        chaos: Mapping[str, Any], *, options: Mapping[str, Any],
                        results: Path | None = RESULTS) -> tuple[Path, Path] | None:
    """Print the header and the pipeline run's report (:func:`pipeline_lines`) and write the record
    (:func:`bench.record.report`, one round, suffix ``pipeline``) into ``results`` (None: no
    record) with the options, the verdict's figures and chaos's whole report (``chaos``:
    ``ChaosResult.as_dict()``); returns the paths written."""
    verdict = "PASSED" if figures.get("passed") else "FAILED"
    document = {"kind": "pipeline", "spec": str(spec), "options": dict(options), "figures": dict(figures),
                "chaos": dict(chaos)}
    return report(record, f"Torn-cut chaos run of pipeline {spec.name}, --kills {options.get('kills')}: {verdict}",
                  1, pipeline_lines(summary, figures), document, results_dir=results, suffix="pipeline")


def main(argv: list[str] | None = None, results: Path | None = RESULTS) -> int:
    """Run the chaos run of ``argv``'s options (default the command line's; module docstring), or
    with ``drive`` a driver process (no record); the record goes into ``results`` (None: no
    record). Returns 0 when the run passed, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m bench.atomic_cut", description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="chaos", choices=["chaos", "drive"])
    parser.add_argument("--pipeline", type=Path, default=None, metavar="SPEC",
                        help="run this pipeline (every Iceberg sink atomic, one PostgreSQL catalog) under "
                             "barrierflow chaos instead of the sinks' driver")
    parser.add_argument("--url", default=os.environ.get("BARRIERFLOW_ATOMIC_URL", ""),
                        help="SQLAlchemy URL of the PostgreSQL catalog database (--pipeline without it: the spec's, "
                             "else a throwaway server)")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--catalog", default="")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--min-polls", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoints", type=int, default=None)
    chaos = parser.add_argument_group("--pipeline: the options of barrierflow chaos")
    chaos.add_argument("--mode", dest="kill_mode", choices=["group", "jvm", "mixed"], default="mixed")
    chaos.add_argument("--min-gap", type=float, default=5.0)
    chaos.add_argument("--max-gap", type=float, default=30.0)
    chaos.add_argument("--point-share", type=float, default=0.25)
    chaos.add_argument("--points", default="", metavar="P1,P2")
    chaos.add_argument("--run-timeout", type=float, default=1800.0)
    chaos.add_argument("--scratch", type=Path, default=None)
    chaos.add_argument("--user-drivers", action="store_true",
                       help="run the drivers as a user does, without the suite's short-lived-driver environment")
    args = parser.parse_args(argv)
    command = command_line() if argv is None else " ".join(["python -m bench.atomic_cut",
                                                             *(shlex.quote(a) for a in argv)])
    if args.pipeline is not None:
        return _pipeline(args, RunRecord.start("atomic-cut", command), results)
    if not args.url:
        parser.error("--url (or BARRIERFLOW_ATOMIC_URL) is required: postgresql+psycopg2://USER@HOST:PORT/DB")
    if args.mode == "drive":
        drive(args.work, args.url, args.catalog, checkpoints=args.checkpoints)
        return 0
    record = RunRecord.start("atomic-cut", command)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    work = args.work or Path(f"/tmp/atomic-cut-{stamp}")
    result = run(args.url, work, kills=args.kills, min_polls=args.min_polls, seed=args.seed,
                 catalog=args.catalog or f"atomic{stamp}")
    record_sinks_run(record, result, kills=args.kills, seed=args.seed, min_polls=args.min_polls, results=results)
    return 0 if result["passed"] else 1


def _pipeline(args: argparse.Namespace, record: RunRecord, results: Path | None) -> int:
    from barrierflow.chaos.report import summary_lines
    from barrierflow.chaos.runner import ChaosOptions

    from bench.atomic_cut_pipeline import run_pipeline

    points = tuple(p.strip() for p in args.points.split(",") if p.strip()) or None
    options = ChaosOptions(kills=args.kills, seed=args.seed, mode=args.kill_mode, min_gap=args.min_gap,
                           max_gap=args.max_gap, point_share=args.point_share, points=points,
                           run_timeout=args.run_timeout, scratch=args.scratch.resolve() if args.scratch else None)
    result, figures = run_pipeline(args.pipeline, options, url=args.url, min_polls=args.min_polls,
                                   suite_drivers=not args.user_drivers)
    record_pipeline_run(record, args.pipeline, summary_lines(result), figures, result.as_dict(),
                        options={"min_polls": args.min_polls, "user_drivers": args.user_drivers, **asdict(options)},
                        results=results)
    print(f"torn-cut run {'PASSED' if figures['passed'] else 'FAILED'}: {figures['polls']} reads during the kills, "
          f"{figures['torn_reads']} torn; rows {figures['rows']} of {figures['rows_expected']} (missing "
          f"{figures['missing']}, extra {figures['extra']}, duplicated {figures['duplicated']})"
          + (f"; {'; '.join(figures['problems'])}" if figures["problems"] else ""))
    return 0 if figures["passed"] else 1

if __name__ == "__main__":
    raise SystemExit(main())
