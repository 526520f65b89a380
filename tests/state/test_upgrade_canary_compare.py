"""The upgrade canary's stream-vs-batch comparison: after its checkpoints passed deep
verification, what the lake will show once the canary's held epochs are committed (the committed
files and the held epochs' write-ahead files, nothing committed to read them) is compared with
the new spec's transformation run in batch over the source's records, for every window closed
at the canary's last checkpoint.

A windowed pipeline (:mod:`tests.support.windowed_canary`) runs to a known offset, is
savepointed and upgraded; the canary then reads on, closing windows while it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.batch.recompute import CANARY_RECOMPUTE_REPORT_KEY, after_events
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.batch import recompute
from barrierflow.ops.savepoint import savepoint
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.upgrade.record import UpgradeStep, read_record

from tests.support.in_session_runs import run_spec as run
from tests.support.windowed_canary import DOUBLED_WHEN_STREAMING, FIRST, NAME, windowed_spec

pytestmark = pytest.mark.spark

SHUFFLE = "spark.sql.shuffle.partitions"
#: Records per batch and partition of the canary (the new spec): one batch closes a window of 100
#: ms, so its checkpoints, however few batches each holds, read input whose windows close.
CANARY_BATCH = 200



def savepointed(spark: Any, tmp: Path) -> tuple[Path, CheckpointStore, int]:
    """The pipeline run to offset FIRST of every partition and savepointed; its spec (reading on)."""
    run(spark, windowed_spec(tmp, "first.yaml", records=FIRST), until_exhausted=True, duration=120)
    old = windowed_spec(tmp, "old.yaml")
    return old, CheckpointStore.for_spec(load_spec(old)), savepoint(old).checkpoint_id


def canary_source(store: CheckpointStore, first: int) -> int:
    """The checkpoint the canary continued from: the newest completed before its first."""
    return max(m.checkpoint_id for m in store.completed() if m.checkpoint_id < first)


def committed_rows(tmp: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(part).num_rows for part in (tmp / "out").glob("part-*.parquet"))


@pytest.mark.slow(60)
def test_a_passing_canary_compares_its_held_output_with_the_batch_recomputation(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    old, store, source = savepointed(spark, tmp_path)
    new = windowed_spec(tmp_path, "new.yaml", batch=CANARY_BATCH)
    before = committed_rows(tmp_path)

    code, out, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "3", "--json")
    assert code == 0, err
    canary = json.loads(out)["canary"]
    comparison = canary["comparison"]
    assert comparison["ran"] and comparison["verdict"] == "matched", comparison
    [compared] = comparison["outputs"]
    assert compared["output"] == "sink results" and compared["verdict"] == "matched", compared
    assert compared["checkpoint_id"] == canary["verified"][-1] and compared["held_epochs"], compared
    assert set(compared["held_epochs"]) <= set(canary["verified"]) and min(compared["held_epochs"]) > source
    assert compared["stream_rows"] == compared["batch_rows"] > 0 and compared["differences"] == 0, compared
    # the canary's windows only: those that started after every record read before the savepoint
    start = after_events(store.get(canary_source(store, canary["verified"][0]))).isoformat()
    assert compared["range"]["start"] == start and compared["range"]["end"] > start, compared
    assert before > 0  # the old spec's windows, committed before the upgrade: outside the range
    stored = json.loads(store.objects.get_bytes(CANARY_RECOMPUTE_REPORT_KEY))
    assert stored["passed"] and stored["held_epochs"] == compared["held_epochs"], stored
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.CANARY_PASSED and record.comparison == comparison

    # what was compared uncommitted is committed now: the whole output up to the same end equals
    # the batch, the canary's windows and the old spec's before them
    committed = recompute(new, spark=spark)
    assert committed.passed and committed.end == compared["range"]["end"], committed.message()
    assert committed.stream_rows >= before + compared["stream_rows"], committed.message()


@pytest.mark.slow(60)
def test_a_canary_whose_output_differs_from_the_batch_rolls_back_though_its_state_verified(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    old, store, source = savepointed(spark, tmp_path)
    new = windowed_spec(tmp_path, "new.yaml", function=DOUBLED_WHEN_STREAMING, batch=CANARY_BATCH)

    code, _, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "3")
    assert code == 1, err
    assert "rolled back" in err and "the stream-vs-batch comparison of sink results failed" in err, err
    assert "changed: window [window_start=" in err, err  # the first differences, named
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.ROLLED_BACK, record
    assert record.verified, record  # deep verification passed: only the comparison failed
    assert record.comparison["verdict"] == "differed" and record.comparison["outputs"][0]["differences"] > 0
    canary = {t.checkpoint_id: t.state for t in TransactionLedger(store.objects, NAME).list()
              if t.checkpoint_id > source}
    assert canary and set(canary.values()) == {TxnState.ABORTED}, canary  # held, then aborted
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == source

    run(spark, old, until_exhausted=True, duration=120)
    report = recompute(old, spark=spark)  # the old spec's output: every closed window once, as the batch has it
    assert report.passed and report.stream_rows == report.batch_rows > 0, report.message()
