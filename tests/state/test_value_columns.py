"""``barrierflow upgrade`` adding a value column to an aggregation's state, then dropping one.

A keyed running-totals pipeline (generator -> ``count`` and ``value_sum`` per key -> Parquet,
RocksDB state) runs, is savepointed and upgraded to a spec whose aggregation also keeps
``value_max`` (declared default 500; its canary runs one checkpoint, deep-verified, then
commits it), runs, is savepointed and upgraded to a spec without ``value_sum`` (no canary), and
runs to the end of its bounded input. The first upgrade is SIGKILLed once in its rewrite
(``upgrade_mid_rewrite``: the rewritten state stored, the new savepoint not recorded) and run
again, which makes the rewrite anew (under the same id: no manifest took it). Without a declared default the upgrade
is refused naming the column and where to declare it, and its dry run says so.

What the output must show (every update of every key, across the three attempts):

* exactly once: no (key, count) update written twice, every key's last count is its number of
  records (what a never-upgraded run of any of the specs gives);
* ``value_sum`` carried through the first upgrade: each key's last update before the second
  savepoint holds the count and sum of its records before that savepoint's barrier;
* ``value_max`` as the rewrite defines it: a key stored before the first upgrade starts from the
  default, so its maximum is the largest of 500 and its values after that savepoint's barrier; a
  key first seen after it has the maximum of all its values (the never-upgraded run's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.manifest import CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.savepoint import savepoint
from barrierflow.ops.upgrade import UpgradeResult, upgrade
from barrierflow.spec import load_spec
from barrierflow.upgrade.record import UpgradeStep, read_record

from tests.support.in_session_runs import run_spec as _run
from tests.support.in_session_runs import write_spec as write

pytestmark = pytest.mark.spark

SHUFFLE = "spark.sql.shuffle.partitions"
PARTITIONS, RECORDS, KEYS, DEFAULT = 2, 300, 50, 500


def spec(tmp: Path, function: str, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    transformation: dict[str, Any] = {"function": function, "output_mode": "update"}
    if defaults is not None:
        transformation["state_defaults"] = defaults
    return {
        "version": 1, "name": "valcols", "work_dir": str(tmp / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": 30, "records_per_partition": RECORDS, "keys": KEYS}],
        "transformation": transformation,
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{tmp / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp / 'checkpoints'}", "interval": "200ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 3, "state_store": "rocksdb"},
    }




def records(before: Manifest | None = None, after: Manifest | None = None) -> list[tuple[int, int]]:
    """(key, value) of every generator record before ``before``'s barrier and at or after
    ``after``'s (None: no bound), from the generator's formula."""
    def offset(m: Manifest, p: int) -> int:
        return int(m.barrier_offsets["events"][str(p)])  # type: ignore[index]

    out = []
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            if (before is not None and i >= offset(before, p)) or (after is not None and i < offset(after, p)):
                continue
            n = i * PARTITIONS + p
            out.append((n % KEYS, (n * 2654435761) % 1000))
    return out


def _killed_in_rewrite(old: Path, new: Path, store: CheckpointStore, canary: int) -> int:
    """``barrierflow upgrade old --to new`` SIGKILLed at ``upgrade_mid_rewrite`` (every part of
    the new savepoint stored, the savepoint not recorded): the record stays at ``report`` naming
    an id that is no checkpoint. Returns that id."""
    from tests.drivers import short_lived_driver_env

    done = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", "upgrade", str(old), "--to", str(new),
                           "--canary-checkpoints", str(canary)],
                          env={**os.environ, **short_lived_driver_env(), "BARRIERFLOW_CRASH_AT": "upgrade_mid_rewrite"},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.REPORT, record
    assert record.savepoint != record.source_savepoint
    assert record.savepoint not in store.checkpoint_ids(include_abandoned=True)
    return record.savepoint


def _upgrade(spark: Any, old: Path, new: Path, store: CheckpointStore, canary: int,
             killed_in_rewrite: bool = False) -> tuple[Manifest, UpgradeResult]:
    """Savepoint ``old``, upgrade it to ``new`` with a canary of ``canary`` checkpoints (after one
    ``upgrade`` killed in its rewrite, when ``killed_in_rewrite``: this one continues it), check
    the source savepoint is untouched and the new one resumes one batch later at the same
    offsets."""
    source = savepoint(old).checkpoint_id
    untouched = store.get(source).model_dump_json()
    abandoned = _killed_in_rewrite(old, new, store, canary) if killed_in_rewrite else None
    before = spark.conf.get(SHUFFLE)
    try:
        result = upgrade(old, new, dry_run=False, spark=spark, canary_checkpoints=canary)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(result, UpgradeResult) and result.source_savepoint == source
    assert store.get(source).model_dump_json() == untouched  # NO_CLAIM
    made = store.get(result.savepoint)
    assert result.savepoint > source and made.kind is CheckpointKind.SAVEPOINT
    assert made.spark_batch_id == store.get(source).spark_batch_id + 1
    assert made.barrier_offsets == store.get(source).barrier_offsets
    if abandoned is not None:  # made anew, under the id the killed rewrite had taken: no manifest used it
        assert result.savepoint == abandoned
    return store.get(source), result


def test_a_value_column_added_with_its_default_then_one_dropped(spark: Any, tmp_path: Path, cli: Any) -> None:
    base = write(tmp_path / "base.yaml", spec(tmp_path, "barrierflow.transforms.aggregations:keyed_running_totals"))
    undeclared = write(tmp_path / "undeclared.yaml", spec(tmp_path, "tests.support.state_transforms:totals_with_max"))
    wider = write(tmp_path / "wider.yaml", spec(tmp_path, "tests.support.state_transforms:totals_with_max",
                                               {"value_max": DEFAULT}))
    narrower = write(tmp_path / "narrower.yaml", spec(tmp_path, "tests.support.state_transforms:totals_count_and_max"))
    store = CheckpointStore.for_spec(load_spec(base))
    _run(spark, base, checkpoints=2)

    code, out, err = cli("upgrade", str(base), "--to", str(undeclared), "--dry-run")
    assert code == 0 and "NEEDS REWRITE" in out.upper(), (out, err)
    assert "value column added: max(value) AS value_max: bigint; no default is declared" in out, out
    code, out, err = cli("upgrade", str(base), "--to", str(wider), "--dry-run")
    assert "value column added: max(value) AS value_max: bigint; a rewrite would add it to every stored value " \
           f"with the declared default value_max = {DEFAULT} (transformation.state_defaults)" in out, out
    savepoint(base)
    code, out, err = cli("upgrade", str(base), "--to", str(undeclared), "--canary-checkpoints", "0")
    assert code == 2, (out, err)
    assert "value column added: max(value) AS value_max: bigint; no default is declared" in err, err
    assert "transformation.state_defaults (value_max: VALUE, or null" in err and "Nothing was changed" in err, err

    first, added = _upgrade(spark, base, wider, store, canary=1, killed_in_rewrite=True)
    assert added.value_columns == {"valcols": f"added value_max (default {DEFAULT})"}, added.value_columns
    assert added.canary["step"] == "canary-passed" and len(added.canary["verified"]) == 1, added.canary
    _run(spark, wider, checkpoints=2)
    second, dropped = _upgrade(spark, wider, narrower, store, canary=0)
    assert dropped.value_columns == {"valcols": "dropped value_sum"}, dropped.value_columns
    _run(spark, narrower, until_exhausted=True, duration=150)

    rows = [r.asDict() for r in spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "out")).collect()]
    updates = [(r["key"], r["count"]) for r in rows]
    assert len(updates) == len(set(updates)), "an update was written twice"
    last: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["count"] > last.get(r["key"], {"count": 0})["count"]:
            last[r["key"]] = r
    every: dict[int, list[int]] = {}
    for key, value in records():
        every.setdefault(key, []).append(value)
    assert {k: r["count"] for k, r in last.items()} == {k: len(v) for k, v in every.items()}

    upto: dict[int, list[int]] = {}
    for key, value in records(before=second):
        upto.setdefault(key, []).append(value)
    with_sum: dict[int, tuple[int, int]] = {}
    for r in rows:
        if r.get("value_sum") is not None and r["count"] > with_sum.get(r["key"], (0, 0))[0]:
            with_sum[r["key"]] = (r["count"], r["value_sum"])
    assert with_sum == {k: (len(v), sum(v)) for k, v in upto.items()}

    stored = {key for key, _ in records(before=first)}
    later: dict[int, list[int]] = {}
    for key, value in records(after=first):
        later.setdefault(key, []).append(value)
    expected = {k: max([DEFAULT, *v]) if k in stored else max(v) for k, v in later.items()}
    assert {k: last[k]["value_max"] for k in later} == expected
    assert any(max(every[k]) != expected[k] for k in stored & set(later)), "the default changed no key's maximum"
