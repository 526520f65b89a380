"""Torn-cut run of the atomic Iceberg mode on a real Spark pipeline under crashes:
``python -m bench.atomic_cut_pipeline --url URL --kills 10``.

A pipeline of three stages (``bench/specs/atomic-cut.yaml``: a generator stage writes the channel
``ab`` on the embedded broker; the final stages ``left`` and ``right`` read it and each write one
Iceberg table, ``lake.a`` and ``lake.b``, in one PostgreSQL catalog with ``catalog.atomic: true``)
runs with ``barrierflow run SPEC --until-exhausted``; each run but the last crashes itself at a
random protocol point (``BARRIERFLOW_CRASH_AT=random:<seed>:<p>``, the points of
:mod:`barrierflow.faults`, ``iceberg_atomic_prepared`` among them: a SIGKILL of the driver) and
the next run restores the latest global checkpoint. Meanwhile the reader of
:mod:`bench.atomic_cut_reader` (no barrierflow code) polls the catalog and counts torn reads. At
the end both tables are scanned with pyiceberg: every generator record ``(src_partition,
src_offset)`` must be in each table exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

SPEC = Path(__file__).resolve().parent / "specs" / "atomic-cut.yaml"
RECORDS = 3000
PARTITIONS = 2


def write_spec(work: Path, catalog: str) -> Path:
    data = yaml.safe_load(SPEC.read_text())
    data["work_dir"] = str(work / "work")
    data["checkpoint"]["storage"] = f"file://{work / 'checkpoints'}"
    for stage in data["stages"]:
        stage["sources"][0].update({"records_per_partition": RECORDS} if stage["name"] == "src" else {})
        for sink in stage["sinks"]:
            if sink["type"] == "iceberg":
                sink["catalog"].update(name=catalog, warehouse=f"file://{work / 'warehouse'}")
    path = work / "atomic-cut.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(url: str, work: Path, *, kills: int, probability: float, seed: int, catalog: str) -> dict[str, Any]:
    from barrierflow.sinks.iceberg_atomic import libpq_params
    from pyiceberg.catalog.sql import SqlCatalog

    from bench.atomic_cut_reader import CatalogReader, torn

    work.mkdir(parents=True, exist_ok=True)
    spec = write_spec(work, catalog)
    env = {**os.environ, "ATOMIC_CUT_CATALOG": url}
    stop = threading.Event()
    stats: dict[str, Any] = {"polls": 0, "torn": 0, "examples": [], "seen": set()}

    def poll() -> None:
        reader = CatalogReader(libpq_params(url), catalog, "lake")
        while not stop.is_set():
            read = reader.read()
            stats["polls"] += 1
            if torn(read):
                stats["torn"] += 1
                stats["examples"] = [*stats["examples"], read][:5]
            stats["seen"].update(c for c in read.values() if c is not None)
        reader.close()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    runs = []
    for attempt in range(kills + 1):
        crash = {"BARRIERFLOW_CRASH_AT": f"random:{seed + attempt}:{probability}"} if attempt < kills else {}
        with (work / f"run-{attempt}.log").open("w") as log:
            proc = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec), "--until-exhausted",
                                   "--duration", "900"], env={**env, **crash}, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=1200)
        point = next((line.split("injected crash at ", 1)[1].split(" (")[0] for line in
                      (work / f"run-{attempt}.log").read_text().splitlines() if "injected crash at" in line), None)
        runs.append({"exit": proc.returncode, "crashed_at": point})
        if proc.returncode == 0:
            break
    stop.set()
    thread.join()
    cat = SqlCatalog(catalog, uri=url)
    expected = {(p, o) for p in range(PARTITIONS) for o in range(RECORDS)}
    result: dict[str, Any] = {"runs": runs, "kills": sum(1 for r in runs if r["exit"] == -9),
                              "polls": stats["polls"], "torn_reads": stats["torn"], "torn_examples": stats["examples"],
                              "checkpoints_seen_by_reader": len(stats["seen"])}
    for name in ("a", "b"):
        rows = cat.load_table(f"lake.{name}").scan().to_arrow()
        got = Counter(zip(rows.column("src_partition").to_pylist(), rows.column("src_offset").to_pylist(),
                          strict=True))
        result[name] = {"rows": rows.num_rows, "expected": len(expected), "missing": len(expected - set(got)),
                        "extra": len(set(got) - expected), "duplicated": sum(c - 1 for c in got.values() if c > 1)}
    result["passed"] = (runs[-1]["exit"] == 0 and result["torn_reads"] == 0 and all(
        result[n][k] == 0 for n in ("a", "b") for k in ("missing", "extra", "duplicated")))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.atomic_cut_pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("BARRIERFLOW_ATOMIC_URL", ""),
                        help="SQLAlchemy URL of the PostgreSQL catalog database")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--probability", type=float, default=0.03, help="crash probability at each protocol point")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url (or BARRIERFLOW_ATOMIC_URL) is required: postgresql+psycopg2://USER@HOST:PORT/DB")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    result = run(args.url, args.work or Path(f"/tmp/atomic-cut-pipeline-{stamp}"), kills=args.kills,
                 probability=args.probability, seed=args.seed, catalog=f"pipe{stamp}")
    print(json.dumps(result, indent=2, default=str))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
