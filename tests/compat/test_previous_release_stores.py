"""Stores written by the previous release open, restore and upgrade unchanged.

``tests/compat/stores/`` holds two pipelines as an earlier release wrote them
(tests/compat/make_fixture_stores.py): ``single`` (one stage, its own checkpoints) and ``multi``
(two stages over a channel on the embedded broker, global checkpoints), each with completed
checkpoints and the savepoint of a ``barrierflow stop --savepoint``. Each test copies one to
``tmp_path`` (the files that name the folder they were written in are relocated to the copy,
as a store keeps the sink paths it was run with) and uses it through the command line, in this
process on the shared SparkSession:

* ``checkpoints list`` and ``show`` read every stored cut and the savepoint as written, and
  the output committed through the savepoint is exactly the running totals of the records its
  offsets cover;
* ``verify`` passes every stored cut; ``restore`` takes an older checkpoint of one stage
  (abandoning the newer ones, the epochs they committed replayed with the output suppressed)
  and the savepoint of two (an older cut is refused there: output was committed after it);
  ``run --until-exhausted`` continues with more checkpoints, and the output (before and after)
  is exactly once: no update twice, and every key's last update the total an independent
  recount of the generator's records gives;
* ``upgrade --to NEW`` from the savepoint to a compatible change (smaller source batches) is
  found compatible, restores the savepoint, and the new spec's run ends exactly once too.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.sinks.parquet import read_committed

from tests.support.running_totals import assert_exactly_once, recount

pytestmark = [pytest.mark.spark]

STORES = Path(__file__).resolve().with_name("stores")
FIXTURE: dict[str, Any] = json.loads((STORES / "FIXTURE.json").read_text(encoding="utf-8"))
PARTITIONS, RECORDS, KEYS = FIXTURE["partitions"], FIXTURE["records_per_partition"], FIXTURE["keys"]
SHUFFLE = "spark.sql.shuffle.partitions"


@pytest.fixture
def session(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The shared SparkSession (a run sets the spec's shuffle partitions on it: put back after),
    with the specs' relative paths resolved against their folder (no BARRIERFLOW_HOME)."""
    monkeypatch.delenv("BARRIERFLOW_HOME", raising=False)
    before = spark.conf.get(SHUFFLE)
    yield spark
    spark.conf.set(SHUFFLE, before)


def copy_of(name: str, tmp_path: Path) -> Path:
    """A copy of stored pipeline ``name`` under ``tmp_path``, relocated; its spec file."""
    recorded = FIXTURE["pipelines"][name]
    folder = tmp_path / name
    shutil.copytree(STORES / name, folder)
    old, new = recorded["written_in"].encode(), str(folder).encode()
    for relative in recorded["naming_it"]:
        path = folder / relative
        path.write_bytes(path.read_bytes().replace(old, new))
    return folder / recorded["spec"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``barrierflow ARGS`` in this process; its output (fails the test on a non-zero exit)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, f"barrierflow {' '.join(args)} exited {code}:\n{out}\n{err[-3000:]}"
    return out


def through(offsets: dict[str, int]) -> dict[int, tuple[int, int]]:
    """key -> (count, sum of value) of the generator's records below ``offsets`` (partition ->
    end), by the generator's formula (see tests/support/running_totals.recount)."""
    totals: dict[int, tuple[int, int]] = {}
    for p, end in offsets.items():
        for i in range(end):
            n = i * PARTITIONS + int(p)
            count, total = totals.get(n % KEYS, (0, 0))
            totals[n % KEYS] = (count + 1, total + (n * 2654435761) % 1000)
    return totals


def committed(spec_path: Path) -> list[dict[str, Any]]:
    table = read_committed(f"file://{spec_path.parent / 'out'}")
    return [] if table is None else table.to_pylist()


def stage_kinds(listing: dict[str, Any]) -> dict[str, dict[int, str]]:
    """stage -> checkpoint id -> kind, from ``checkpoints list --json``."""
    return {stage: {m["checkpoint_id"]: m["kind"] for m in own["completed"]}
            for stage, own in listing["stages"].items()}


@pytest.mark.slow(60)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["single", "multi"])
def test_a_stored_pipeline_lists_restores_and_runs_on_exactly_once(
        session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    recorded = FIXTURE["pipelines"][name]
    savepoint, completed = recorded["savepoint"], recorded["completed"]
    stages = ["a", "b"] if name == "multi" else ["compat-single"]
    spec = copy_of(name, tmp_path)

    listing = json.loads(cli(capsys, "checkpoints", "list", str(spec), "--json"))
    assert [c["checkpoint_id"] for c in listing["completed"]] == completed
    assert listing["noun"] == ("global checkpoint" if name == "multi" else "checkpoint")
    assert listing["skipped"] == [] and listing["failed"] == []
    kinds = stage_kinds(listing)
    assert list(kinds) == stages
    for stage in stages:
        assert kinds[stage] == {c: "savepoint" if c == savepoint else "checkpoint" for c in completed}, stage
    shown = json.loads(cli(capsys, "checkpoints", "show", str(spec), str(savepoint), "--json"))
    assert set(shown["stages"]) == set(stages)
    first = shown["stages"][stages[0]]["manifest"]
    assert first["kind"] == "savepoint" and first["barrier_offsets"]["events"] == recorded["savepoint_offsets"]
    # What the savepoint committed: exactly the totals of the records its offsets cover.
    before = committed(spec)
    assert_exactly_once(before, through(recorded["savepoint_offsets"]))

    verified = json.loads(cli(capsys, "verify", str(spec), "--json"))
    assert [r["checkpoint_id"] for r in verified["reports"]] == completed
    assert all(r["passed"] for r in verified["reports"]), verified

    older = completed[-3]
    if name == "single":
        # An older checkpoint: the newer ones (the savepoint too) are abandoned, and the epochs
        # committed after it are replayed with their output suppressed (from the stored ledger).
        restored = json.loads(cli(capsys, "restore", str(spec), "--checkpoint", str(older), "--json"))
        assert restored["checkpoint_id"] == older and restored["abandoned"] == completed[-2:], restored
        abandoned = completed[-2:]
    else:
        # Several stages replay nothing: an older cut is refused (the stored ledger shows the
        # output committed after it), the savepoint restores.
        capsys.readouterr()
        assert main(["restore", str(spec), "--checkpoint", str(older)]) == 2
        assert f"global checkpoint {older} of pipeline compat-multi is older than output already committed" in \
            capsys.readouterr().err
        restored = json.loads(cli(capsys, "restore", str(spec), "--checkpoint", str(savepoint), "--json"))
        assert restored["checkpoint_id"] == savepoint and restored["abandoned"] == [], restored
        abandoned = []
    cli(capsys, "run", str(spec), "--until-exhausted", "--duration", "300", "--quiet")

    after = json.loads(cli(capsys, "checkpoints", "list", str(spec), "--json"))
    assert after["abandoned"] == abandoned, after["abandoned"]
    new = [c["checkpoint_id"] for c in after["completed"] if c["checkpoint_id"] > savepoint]
    assert len(new) >= 2, after["completed"]
    assert_exactly_once(committed(spec), recount(PARTITIONS, RECORDS, KEYS))


@pytest.mark.slow(60)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["single", "multi"])
def test_a_stored_savepoint_upgrades_to_a_compatible_change(
        session: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    recorded = FIXTURE["pipelines"][name]
    spec = copy_of(name, tmp_path)
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    generator = data["stages"][0]["sources"][0] if name == "multi" else data["sources"][0]
    generator["max_records_per_batch"] = 5  # a compatible change: smaller source batches
    changed = spec.with_name(f"{name}-smaller-batches.yaml")
    changed.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")

    report = json.loads(cli(capsys, "upgrade", str(spec), "--to", str(changed), "--dry-run", "--json"))
    assert report["verdict"] == "compatible", report
    result = json.loads(cli(capsys, "upgrade", str(spec), "--to", str(changed), "--canary-checkpoints", "0",
                            "--json"))
    assert result["source_savepoint"] == recorded["savepoint"], result
    cli(capsys, "run", str(changed), "--until-exhausted", "--duration", "300", "--quiet")
    assert_exactly_once(committed(changed), recount(PARTITIONS, RECORDS, KEYS))
