"""``barrierflow upgrade``'s canary: the new spec commits nothing until its first checkpoints pass
deep verification; a failed canary rolls back by itself; a killed upgrade continues when its
command is run again.

A keyed running-totals pipeline (generator, 5 keys -> count and sum per key -> Parquet) is
savepointed and upgraded. Its output (every update of every key, across every attempt) must
hold no update twice and end at the totals an independent recount of the generator's records
gives: whatever the canary pre-committed and the upgrade then aborted (a rollback) or committed
(a pass) was written exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.savepoint import savepoint
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.upgrade.record import UpgradeStep, read_record, recorded_upgrades
from barrierflow.verification.report import load_report

from tests.support.in_session_runs import run_spec as run
from tests.support.running_totals import HEALTHY, POISONED, assert_exactly_once, recount, totals_spec

pytestmark = pytest.mark.spark

NAME, PARTITIONS, RECORDS, KEYS = "canaried", 2, 400, 5
SHUFFLE = "spark.sql.shuffle.partitions"


def spec_file(tmp: Path, file: str, *, function: str = HEALTHY, shuffle: int = 2, state_store: str = "hdfs") -> Path:
    return totals_spec(tmp, file, name=NAME, partitions=PARTITIONS, records=RECORDS, keys=KEYS, shuffle=shuffle,
                       function=function, state_store=state_store)



def assert_output_exact(spark: Any, tmp: Path) -> None:
    """No update written twice, and the last update of every key is its recounted total (the
    generator's formula: key = n % keys, value = n * 2654435761 % 1000, n = i * partitions + p)."""
    rows = [r.asDict() for r in spark.read.parquet(str(tmp / "out")).collect()]
    assert_exactly_once(rows, recount(PARTITIONS, RECORDS, KEYS))


def transactions(store: CheckpointStore, after: int) -> dict[int, TxnState]:
    return {t.checkpoint_id: t.state for t in TransactionLedger(store.objects, NAME).list() if t.checkpoint_id > after}


@pytest.mark.slow(60)
def test_a_failing_canary_rolls_back_and_the_old_spec_runs_to_the_exact_output(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    old = spec_file(tmp_path, "old.yaml")
    new = spec_file(tmp_path, "new.yaml", function=POISONED)
    store = CheckpointStore.for_spec(load_spec(old))
    run(spark, old, checkpoints=2)
    source = savepoint(old).checkpoint_id
    command = ("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "2")

    code, _, err = cli(*command)
    assert code == 1, err
    assert "rolled back" in err and "failed the expectation check" in err, err
    assert "expect_column_values_to_be_between" in err and "unexpected of" in err, err  # a state value, not a column
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.ROLLED_BACK and record.source_savepoint == source
    canary = transactions(store, source)
    assert canary and set(canary.values()) == {TxnState.ABORTED}, canary  # pre-committed, then aborted
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == source
    attempt = store.attempt()

    code, _, err = cli(*command)  # the same command again: the recorded rollback, nothing run
    assert code == 1 and "rolled back" in err and store.attempt() == attempt, err
    [kept] = recorded_upgrades(store.objects)  # kept in the history once, not again by the rerun
    assert kept.record == read_record(store.objects) and kept.key.startswith("_upgrades/") and not kept.in_progress

    run(spark, old, until_exhausted=True, duration=150)
    assert_output_exact(spark, tmp_path)


@pytest.mark.slow(60)
def test_a_failing_canary_stops_at_its_first_bad_checkpoint_not_after_n(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    """An unbounded source and a canary of 100,000 checkpoints: without stopping at the first
    failed verification the canary would run for hours (the test's timeout); it ends, rolled
    back, and at most the checkpoint in flight when the verification failed is triggered after
    it (times of one clock compared, not durations: the machine's speed does not matter)."""
    def unbounded(path: Path) -> Path:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        del data["sources"][0]["records_per_partition"]
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    old = unbounded(spec_file(tmp_path, "old.yaml"))
    new = unbounded(spec_file(tmp_path, "new.yaml", function=POISONED))
    store = CheckpointStore.for_spec(load_spec(old))
    run(spark, old, checkpoints=2)
    source = savepoint(old).checkpoint_id

    code, _, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "100000")
    assert code == 1 and "rolled back" in err and "failed the expectation check" in err, err
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.ROLLED_BACK
    canary = transactions(store, source)  # the canary's epochs, one per checkpoint it completed
    assert canary and set(canary.values()) == {TxnState.ABORTED}, canary
    reports = {cid: load_report(store.objects, cid) for cid in canary}
    failed_at = min(r.finished for r in reports.values() if r is not None and not r.passed)
    # (a checkpoint that never completed has no manifest, so no trigger time on record: left out)
    completed = set(store.checkpoint_ids(include_abandoned=True))
    late = [cid for cid in canary if cid in completed and store.get(cid).trigger_time > failed_at]
    assert len(late) <= 1, f"canary checkpoints triggered after its verification failed: {late}"


@pytest.mark.slow(90)
def test_an_upgrade_killed_after_the_rewrite_and_in_its_canary_completes_when_run_again(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    from tests.drivers import short_lived_driver_env

    two = spec_file(tmp_path, "two.yaml", state_store="rocksdb")
    four = spec_file(tmp_path, "four.yaml", shuffle=4, state_store="rocksdb")
    store = CheckpointStore.for_spec(load_spec(two))
    run(spark, two, checkpoints=2)
    source = savepoint(two).checkpoint_id
    command = ("upgrade", str(two), "--to", str(four), "--canary-checkpoints", "2")

    def killed_at(point: str) -> UpgradeStep:
        result = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", *command],
                                env={**os.environ, **short_lived_driver_env(), "BARRIERFLOW_CRASH_AT": point},
                                capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
        record = read_record(store.objects)
        assert record is not None
        return record.step

    assert killed_at("upgrade_after_rewrite") is UpgradeStep.REWRITTEN
    rescaled = read_record(store.objects).savepoint  # type: ignore[union-attr]
    assert rescaled > source and store.get(rescaled).spark_batch_id == store.get(source).spark_batch_id + 1
    assert killed_at("after_manifest") is UpgradeStep.CANARY_RUNNING  # the canary's first checkpoint
    first = transactions(store, rescaled)
    assert first and TxnState.COMMITTED not in first.values(), first
    code, _, err = cli("run", str(four), "--checkpoints", "1")  # nothing starts around the upgrade
    assert code == 2 and "unfinished upgrade" in err, err

    code, out, err = cli(*command, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["source_savepoint"] == source and document["savepoint"] == rescaled
    assert document["canary"]["attempts"] == 2 and len(document["canary"]["verified"]) == 2, document["canary"]
    states = transactions(store, rescaled)
    assert {states[c] for c in first} == {TxnState.ABORTED}  # the killed canary's epochs
    assert {states[c] for c in document["canary"]["verified"]} == {TxnState.COMMITTED}, states
    assert read_record(store.objects).step is UpgradeStep.CANARY_PASSED  # type: ignore[union-attr]
    [kept] = recorded_upgrades(store.objects)  # one upgrade, however often it was killed and continued
    assert kept.record == read_record(store.objects) and kept.key.startswith("_upgrades/")

    run(spark, four, until_exhausted=True, duration=150)
    assert_output_exact(spark, tmp_path)


@pytest.mark.slow(45)
def test_a_rescale_discards_what_the_stopped_run_wrote_ahead_after_its_savepoint(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    """A run stopped after its savepoint may have written ahead the micro-batch in flight (its
    stop came after the write-ahead, before Spark committed the batch). The rescaled savepoint
    resumes one batch id later (its batch is the repartition, which reads no input), so that
    stale batch sits at the new savepoint's own batch id: the restore discards it, the canary
    passes, and nothing of it is ever committed."""
    import pyarrow as pa
    from barrierflow.sinks.write_ahead import write_ahead_batch

    two = spec_file(tmp_path, "two.yaml", state_store="rocksdb")
    four = spec_file(tmp_path, "four.yaml", shuffle=4, state_store="rocksdb")
    store = CheckpointStore.for_spec(load_spec(two))
    run(spark, two, checkpoints=2)
    source = savepoint(two).checkpoint_id
    stale = store.get(source).spark_batch_id + 1
    rows = pa.table({"key": pa.array([0], pa.int64()), "count": pa.array([10**6], pa.int64()),
                     "value_sum": pa.array([1], pa.int64())})
    write_ahead_batch(f"file://{tmp_path / 'out' / '_staging'}", stale, rows, fence=1)

    code, out, err = cli("upgrade", str(two), "--to", str(four), "--canary-checkpoints", "1", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert store.get(document["savepoint"]).spark_batch_id == stale, document
    assert len(document["canary"]["verified"]) == 1, document["canary"]
    run(spark, four, until_exhausted=True, duration=150)
    assert_output_exact(spark, tmp_path)  # the stale batch's count of a million never committed
