"""``barrierflow upgrade SPEC --to NEW_SPEC`` rescaling a single-stage pipeline's state.

A keyed running-totals pipeline (generator -> count and sum per key -> Parquet, RocksDB state)
runs at 4 shuffle partitions, is savepointed and upgraded to 8, runs, is savepointed and
upgraded back to 4, and runs to the end of its bounded input. Its output (every update of
every key, across the three attempts) must hold no update twice and end at the totals an
independent recount of the generator's records gives: the rescaled state carried every key
exactly once. Each upgrade leaves its source savepoint untouched and records a new one whose
state has the new partition count. The upgrades run no canary (``--canary-checkpoints 0``; the
canary is test_upgrade_canary's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.ops.savepoint import savepoint
from barrierflow.ops.upgrade import UpgradeResult, upgrade
from barrierflow.spec import load_spec

from tests.support.in_session_runs import run_spec as _run
from tests.support.in_session_runs import write_spec as write
from tests.support.running_totals import assert_exactly_once, recount

pytestmark = pytest.mark.spark

SHUFFLE = "spark.sql.shuffle.partitions"
PARTITIONS, RECORDS, KEYS = 2, 900, 300


def totals_spec(tmp: Path, shuffle: int, state_store: str = "rocksdb") -> dict[str, Any]:
    return {
        "version": 1,
        "name": "rescaled",
        "work_dir": str(tmp / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": 60, "records_per_partition": RECORDS, "keys": KEYS}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                           "output_mode": "update"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{tmp / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp / 'checkpoints'}", "interval": "200ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": shuffle, "state_store": state_store},
    }




def _state_partitions(store: CheckpointStore, checkpoint_id: int) -> set[int]:
    return {int(f.path.split("/")[2]) for f in store.get(checkpoint_id).files
            if f.path.startswith("state/0/") and f.path.split("/")[2].isdigit()}


def _upgrade(spark: Any, old: Path, new: Path, store: CheckpointStore, partitions: tuple[int, int], *,
             cli: Any = None) -> int:
    """Savepoint the newest checkpoint, upgrade ``old`` -> ``new`` (through the command line with
    ``cli``: capsys) and check the new savepoint; returns its id."""
    source = savepoint(old).checkpoint_id
    offsets = store.get(source).barrier_offsets["events"]
    assert all(o < RECORDS for o in offsets.values()), f"no input left for the upgraded run: {offsets}"
    untouched = store.get(source).model_dump_json()
    before = spark.conf.get(SHUFFLE)
    try:
        if cli is None:
            result = upgrade(old, new, dry_run=False, spark=spark, canary_checkpoints=0)
            assert isinstance(result, UpgradeResult)
            made_id, rescaled = result.savepoint, result.rescaled
            assert result.source_savepoint == source
        else:
            cli.readouterr()
            assert main(["upgrade", str(old), "--to", str(new), "--canary-checkpoints", "0", "--json"]) == 0
            document = json.loads(cli.readouterr().out)
            assert document["source_savepoint"] == source
            made_id = document["savepoint"]
            rescaled = {s: (r["from"], r["to"]) for s, r in document["rescaled"].items()}
    finally:
        spark.conf.set(SHUFFLE, before)
    assert made_id > source and rescaled == {"rescaled": partitions}
    assert store.get(source).model_dump_json() == untouched  # NO_CLAIM: the source savepoint is never changed
    made = store.get(made_id)
    assert made.kind is CheckpointKind.SAVEPOINT and made.spark_batch_id == store.get(source).spark_batch_id + 1
    assert made.barrier_offsets == store.get(source).barrier_offsets
    assert _state_partitions(store, made_id) == set(range(partitions[1]))
    return made_id


def test_rescale_4_to_8_to_4_keeps_every_key_exactly_once(spark: Any, tmp_path: Path, capsys: Any) -> None:
    four = write(tmp_path / "four.yaml", totals_spec(tmp_path, 4))
    eight = write(tmp_path / "eight.yaml", totals_spec(tmp_path, 8))
    store = CheckpointStore.for_spec(load_spec(four))

    _run(spark, four, checkpoints=2)
    wider = _upgrade(spark, four, eight, store, (4, 8))
    # the rewritten savepoint reads as 8 partitions, fits the new spec and passes deep verification
    before = spark.conf.get(SHUFFLE)
    try:
        report = upgrade(eight, eight, dry_run=True, checkpoint_id=wider, spark=spark)
        assert report.verdict.value == "compatible", report.as_dict()
        assert [o.partitions for s in report.stages for o in s.operators] == [8]
        capsys.readouterr()
        assert main(["verify", str(eight), "--checkpoint", str(wider), "--deep"]) == 0, capsys.readouterr()
    finally:
        spark.conf.set(SHUFFLE, before)
    _run(spark, eight, checkpoints=2)
    back = _upgrade(spark, eight, four, store, (8, 4), cli=capsys)
    _run(spark, four, until_exhausted=True, duration=150)

    rows = [r.asDict() for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    count = next(c for c in rows[0] if "count" in c)
    total = next(c for c in rows[0] if "sum" in c)
    assert_exactly_once(rows, recount(PARTITIONS, RECORDS, KEYS), count=count, total=total)
    newest = store.latest()
    assert newest is not None and newest.checkpoint_id > back


def test_refusals_name_the_fix_and_change_nothing(spark: Any, tmp_path: Path, capsys: Any) -> None:
    """Without a savepoint: refused naming ``stop --savepoint``; an HDFS-backed state: refused
    naming the provider; neither writes a manifest."""
    four = write(tmp_path / "four.yaml", totals_spec(tmp_path, 4, "hdfs"))
    eight = write(tmp_path / "eight.yaml", totals_spec(tmp_path, 8, "hdfs"))
    store = CheckpointStore.for_spec(load_spec(four))
    _run(spark, four, checkpoints=1)
    ids = store.checkpoint_ids()
    capsys.readouterr()
    assert main(["upgrade", str(four), "--to", str(eight)]) == 2
    err = capsys.readouterr().err
    assert "no savepoint to upgrade from" in err and f"barrierflow stop {four} --savepoint" in err, err
    savepoint(four)
    assert main(["upgrade", str(four), "--to", str(eight), "--json"]) == 2
    err = capsys.readouterr().err
    assert "hdfs state store" in err and "not yet supported" in err and "Nothing was changed" in err, err
    assert store.checkpoint_ids() == ids
    code = main(["upgrade", str(four), "--to", str(eight), "--dry-run", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["verdict"] == "needs rewrite"
