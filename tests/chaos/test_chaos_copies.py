"""``barrierflow chaos`` runs its copies of a pipeline, never the pipeline: whatever a run of a
copy writes, the stores the spec names hold the same before and after. Without Spark: each run
is a stand-in process that writes a file into every store of the spec it is given (its work
dir and every storage URI) and one committed Parquet file, as a run would. The Spark run of
the same check is in tests/scenarios/test_chaos.py (the ``--processes`` test)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from barrierflow.chaos import runner
from barrierflow.cli.main import main

#: Stands in for ``barrierflow run COPY``: writes into every store the copy's spec names.
EVERYWHERE = """
import os, sys, yaml, pyarrow as pa, pyarrow.parquet as pq
spec = yaml.safe_load(open(sys.argv[1]))
def walk(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in ("sources", "transformation"):
                yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)
    elif isinstance(node, str) and node.startswith("file://"):
        yield node.removeprefix("file://")
for path in [spec["work_dir"], *walk(spec)]:
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, "written-by-a-run"), "w").write(spec["name"])
pq.write_table(pa.table({"key": [1, 2]}), spec["sinks"][0]["path"].removeprefix("file://") + "/part-0.parquet")
"""


def listing(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(errors="replace") if p.suffix != ".parquet" else "parquet"
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_copies_write_none_of_the_stores_the_spec_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_run_command",
                        lambda spec_path, processes: [sys.executable, "-c", EVERYWHERE, str(spec_path)])
    stores = tmp_path / "stores"
    data = {"version": 1, "name": "orders", "work_dir": str(stores / "work"),
            "sources": [{"name": "events", "type": "generator", "partitions": 2, "records_per_partition": 5}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "lake", "type": "parquet", "path": f"file://{stores / 'lake'}"}],
            "checkpoint": {"storage": f"file://{stores / 'chk'}"},
            "dead_letter_path": f"file://{stores / 'dead-letter'}",
            "event_times_path": f"file://{stores / 'event-times'}",
            "batch": {"rollups": f"file://{stores / 'rollups'}"}}
    spec = tmp_path / "orders.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    for store in ("work", "lake", "chk", "dead-letter", "event-times", "rollups"):
        (stores / store).mkdir(parents=True)
        (stores / store / "the-pipelines-own").write_text(store)
    before = listing(stores)

    code = main(["chaos", str(spec), "--kills", "1", "--min-gap", "60", "--max-gap", "60",
                 "--scratch", str(tmp_path / "scratch"), "--json"])
    report = json.loads(capsys.readouterr().out)

    # Both copies ran (the stand-in ends before its kill, so the verdict says so) and wrote
    # into every store of their own specs, none of the spec's.
    assert code == 1 and report["problem"].startswith("the pipeline reached the end of its sources after 0 of")
    written = sorted(str(p.relative_to(tmp_path / "scratch")) for p in (tmp_path / "scratch").rglob("written-by-a-run"))
    assert len(written) == 2 * 6, written  # work dir, checkpoints, lake, dead letters, event times, rollups
    after = listing(stores)
    # chaos itself keeps its latest report in the pipeline's checkpoint store (the Checkpoints
    # page links to it); nothing else there changed
    assert sorted(set(after) - set(before)) == ["chk/reports/chaos-latest.html", "chk/reports/chaos-latest.json"]
    assert {key: after[key] for key in before} == before
