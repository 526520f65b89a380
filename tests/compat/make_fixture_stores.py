"""Write the compatibility fixture: the stores of two pipelines as this release writes them.

``python -m tests.compat.make_fixture_stores`` (from the repository root, after ``make
install``) replaces ``tests/compat/stores/`` with two small pipelines, each run once by
``barrierflow run`` in a driver process and stopped by ``barrierflow stop --savepoint`` after a
few completed checkpoints:

* ``single/``: one stage, generator -> running totals per key -> Parquet (its own checkpoints);
* ``multi/``: stage ``a`` (generator -> projection) -> channel ``ab`` on the embedded broker ->
  stage ``b`` (running totals per key) -> Parquet (global checkpoints).

Every path in a spec is relative (resolved against the spec file's folder), so the folders can
be copied anywhere; the script fails if a stored file names the folder it was written in. Kept
per pipeline: the spec, the checkpoint store (``chk/``), the committed output (``out/``) and,
for ``multi``, the embedded broker's data (``work/embedded-broker``: the channel's records the
cut's offsets point into). The rest of the work dir (Spark's local checkpoint, logs) is left
out: a restore writes it from the store. ``FIXTURE.json`` records what the tests compare with
(the records of the bounded sources, the savepoint's id) and the library version that wrote it.

tests/compat/test_previous_release_stores.py opens, restores and upgrades copies of them with
the current code. Regenerate only when a release deliberately changes the stored format, and
keep the previous release's folders then (the point is that old stores keep working).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from tests.drivers import short_lived_driver_env

HERE = Path(__file__).resolve().parent
STORES = HERE / "stores"
#: Both pipelines' bounded generators: PARTITIONS x RECORDS records over KEYS keys, throttled so
#: that the stop comes while input is left (the tests' runs read the rest).
PARTITIONS, RECORDS, KEYS = 2, 300, 5
#: Completed checkpoints before the stop (the stop's savepoint comes after them).
CHECKPOINTS = 3
TOTALS = "barrierflow.transforms.aggregations:keyed_running_totals"
SPARK = {"master": "local[1]", "shuffle_partitions": 2,
         "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"}}


def _generator(rows_per_second: int) -> dict[str, Any]:
    return {"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": rows_per_second,
            "max_records_per_batch": 10, "keys": KEYS, "records_per_partition": RECORDS}


def single_spec() -> dict[str, Any]:
    """One stage: generator -> running totals per key (update mode) -> Parquet."""
    return {
        "version": 1, "name": "compat-single", "work_dir": "work",
        "sources": [_generator(15)],
        "transformation": {"function": TOTALS, "output_mode": "update"},
        "sinks": [{"name": "out", "type": "parquet", "path": "file://out"}],
        "trigger": {"interval": "200ms"},
        "checkpoint": {"storage": "file://chk", "interval": "700ms", "timeout": "120s", "retained": 100},
        "spark": SPARK,
    }


def multi_spec() -> dict[str, Any]:
    """Two stages over a channel on the embedded broker: ``a`` projects the generator's records
    into channel ``ab``; ``b`` keeps running totals per key and writes Parquet."""
    return {
        "version": 1, "name": "compat-multi", "work_dir": "work",
        "channels": [{"name": "ab", "partitions": 2, "bootstrap": "embedded"}],
        "stages": [
            {"name": "a", "sources": [_generator(15)],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"key": "key", "value": "value"}}},
             "sinks": [{"type": "channel", "channel": "ab"}]},
            {"name": "b",
             "sources": [{"type": "channel", "channel": "ab", "max_records_per_batch": 50,
                          "json_fields": {"key": "long", "value": "long"}}],
             "transformation": {"function": TOTALS, "output_mode": "update"},
             "sinks": [{"name": "out", "type": "parquet", "path": "file://out"}]},
        ],
        "trigger": {"interval": "200ms"},
        "checkpoint": {"storage": "file://chk", "interval": "700ms", "timeout": "120s", "mode": "aligned",
                       "retained": 100},
        "spark": SPARK,
    }


def _cli(*args: str, cwd: Path, stderr: int = subprocess.STDOUT) -> subprocess.Popen[str]:
    env = {**os.environ, **short_lived_driver_env()}
    env.pop("BARRIERFLOW_HOME", None)  # the specs' relative paths resolve against their folder
    return subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _completed(folder: Path, multi: bool) -> list[int]:
    """The ids of the completed checkpoints (several stages: global checkpoints) in ``folder``."""
    marker = "global/chk-*/_metadata.json" if multi else "chk-*/_metadata.json"
    return sorted(int(p.parent.name.removeprefix("chk-")) for p in (folder / "chk").glob(marker))


def _write(folder: Path, name: str, data: dict[str, Any]) -> dict[str, Any]:
    """Run the pipeline of ``data`` in ``folder`` until CHECKPOINTS cuts completed, stop it with a
    savepoint, and return what FIXTURE.json records of it."""
    multi = "stages" in data
    spec = folder / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    driver = _cli("run", spec.name, "--quiet", cwd=folder)
    deadline = time.monotonic() + 600
    while len(_completed(folder, multi)) < CHECKPOINTS:
        if driver.poll() is not None or time.monotonic() > deadline:
            driver.kill()
            raise SystemExit(f"{name}: the run ended before {CHECKPOINTS} checkpoints:\n{driver.communicate()[0]}")
        time.sleep(0.2)
    stop = _cli("stop", spec.name, "--savepoint", "--timeout", "3m", "--json", cwd=folder,
                stderr=subprocess.PIPE)
    said, why = stop.communicate(timeout=300)
    out, _ = driver.communicate(timeout=300)
    if stop.returncode != 0 or driver.returncode != 0:
        raise SystemExit(f"{name}: stop exited {stop.returncode}, the run {driver.returncode}:\n{said}{why}\n{out}")
    result = json.loads(said)
    savepoint = int(result["savepoint"])
    first = folder / "chk" / ("stages/a/" if multi else "") / f"chk-{savepoint}/_metadata.json"
    offsets = json.loads(first.read_text(encoding="utf-8"))["barrier_offsets"]["events"]
    if not all(0 < int(o) < RECORDS for o in offsets.values()):
        raise SystemExit(f"{name}: the savepoint covers no input or all of it ({offsets}); tune the throttle")
    return {"spec": spec.name, "savepoint": savepoint, "completed": _completed(folder, multi),
            "savepoint_offsets": offsets}


def _keep(folder: Path, target: Path, multi: bool) -> None:
    """Copy what the fixture keeps from ``folder`` to ``target``."""
    target.mkdir(parents=True)
    for entry in (*folder.glob("*.yaml"), folder / "chk", folder / "out"):
        (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, target / entry.name)
    if multi:
        # Its data only: the broker writes its config (ports, paths) at every start; logs are not kept.
        shutil.copytree(folder / "work" / "embedded-broker" / "data", target / "work" / "embedded-broker" / "data")


def _absolute_paths(target: Path, written_in: Path) -> list[str]:
    """The files under ``target`` that name the folder they were written in (the manifests'
    Spark checkpoint and work dir, the ledger's sink paths): the tests relocate them."""
    return sorted(str(p.relative_to(target)) for p in target.rglob("*")
                  if p.is_file() and str(written_in).encode() in p.read_bytes())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="barrierflow-compat-") as scratch:
        work = Path(scratch)
        fixture: dict[str, Any] = {"barrierflow": version("barrierflow"), "partitions": PARTITIONS,
                                   "records_per_partition": RECORDS, "keys": KEYS, "pipelines": {}}
        made = {}
        for name, data in (("single", single_spec()), ("multi", multi_spec())):
            folder = work / name
            folder.mkdir()
            fixture["pipelines"][name] = _write(folder, name, data)
            made[name] = folder
        if STORES.exists():
            shutil.rmtree(STORES)
        for name, folder in made.items():
            _keep(folder, STORES / name, name == "multi")
            fixture["pipelines"][name]["written_in"] = str(folder)
            fixture["pipelines"][name]["naming_it"] = _absolute_paths(STORES / name, folder)
        (STORES / "FIXTURE.json").write_text(json.dumps(fixture, indent=2) + "\n", encoding="utf-8")
    size = sum(p.stat().st_size for p in STORES.rglob("*") if p.is_file())
    print(f"wrote {STORES} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
