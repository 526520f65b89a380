"""Replay plans (no Spark): built from committed ledger transactions, followed by the batch
planner, and used by the stager to drop output that was already committed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from barrierflow.barriers.control import ControlChannel, replay_end
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.planner import PlanRequest, plan_batch
from barrierflow.barriers.replay_plan import ReplayDivergedError, ReplayImpossibleError, ReplayPlan
from barrierflow.sinks.parquet import ParquetFileSink, read_committed
from barrierflow.sinks.write_ahead import WriteAheadWriter, write_ahead_batch
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import Transaction, TransactionLedger, TxnState
from barrierflow.transactions.write_ahead import WriteAheadBatches

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def txn(checkpoint_id: int, ends: dict[int, dict[str, int]], *, record_ends: bool = True) -> Transaction:
    return Transaction(pipeline="p", sink="out", sink_type="parquet", transaction_id=f"t{checkpoint_id}",
                       checkpoint_id=checkpoint_id, attempt=0, batches=sorted(ends), state=TxnState.COMMITTED,
                       created_at=NOW, updated_at=NOW, batch_ends=ends if record_ends else {})


def plan_for(restored_from: int, start: dict[str, int], committed: list[Transaction]) -> ReplayPlan:
    plan = ReplayPlan.for_restore(restored_from, start, committed)
    assert plan is not None
    return plan


def test_plan_orders_batches_and_skips_those_at_or_before_the_restored_barrier() -> None:
    plan = plan_for(3, {"0": 10, "1": 10}, [
        txn(5, {7: {"0": 40, "1": 35}, 8: {"0": 40, "1": 35}}),  # batch 8: a no-data batch, same end
        txn(4, {4: {"0": 10, "1": 10}, 5: {"0": 20, "1": 18}, 6: {"0": 30, "1": 30}}),
    ])
    assert plan.ends == ({"0": 20, "1": 18}, {"0": 30, "1": 30}, {"0": 40, "1": 35})
    assert plan.epochs == (4, 5) and plan.through == {"0": 40, "1": 35}
    assert ReplayPlan.from_json(plan.to_json()) == plan


def test_output_beyond_the_barrier_counts_not_the_checkpoint_id() -> None:
    """Checkpoint 10 was taken during an earlier replay (attempt 1) at offset 20; epochs 4-5
    (attempt 0) committed output up to 40: the rest of it is still replayed suppressed."""
    old = [txn(4, {4: {"0": 10}, 5: {"0": 20}}), txn(5, {6: {"0": 30}, 7: {"0": 40}})]
    plan = plan_for(10, {"0": 20}, old)
    assert plan.ends == ({"0": 30}, {"0": 40}) and plan.epochs == (5,)
    assert ReplayPlan.for_restore(10, {"0": 40}, old) is None  # all of it is behind the barrier
    empty = txn(11, {})
    assert ReplayPlan.for_restore(10, {"0": 40}, [*old, empty]) is None  # an empty epoch has no output
    legacy = txn(3, {2: {"0": 5}}, record_ends=False)
    assert ReplayPlan.for_restore(10, {"0": 40}, [legacy]) is None  # older than the checkpoint: covered


def test_planner_cuts_replayed_batches_at_the_recorded_ends_then_plans_normally() -> None:
    plan = plan_for(1, {"0": 0}, [txn(2, {1: {"0": 5}, 2: {"0": 12}})])
    start = SourceOffset({"0": 0}, barrier=1)
    first = plan_batch(PlanRequest(start, {"0": 100}, max_records_per_partition=50,
                                   replay_end=plan.next_end(start.partitions), requested_barrier=7))
    assert first.end.partitions == {"0": 5} and first.end.barrier == 7  # barriers still cut replayed batches
    second = plan_batch(PlanRequest(first.end, {"0": 100}, replay_end=plan.next_end(first.end.partitions)))
    assert second.end.partitions == {"0": 12}
    assert plan.next_end(second.end.partitions) is None  # replay over
    third = plan_batch(PlanRequest(second.end, {"0": 100}, max_records_per_partition=50))
    assert third.end.partitions == {"0": 62}


def test_hold_wins_over_replay(tmp_path: Path) -> None:
    plan = plan_for(1, {"0": 0}, [txn(2, {1: {"0": 5}})])
    control = ControlChannel(tmp_path)
    control.set_replay_plan(plan)
    control.reset()  # the coordinator's start keeps the plan
    start = SourceOffset({"0": 0})
    assert replay_end(control, start) == {"0": 5}
    held = plan_batch(PlanRequest(start, {"0": 9}, hold=True, replay_end=replay_end(control, start)))
    assert held.end.partitions == {"0": 0}
    control.set_replay_plan(None)
    assert replay_end(control, start) is None


def test_a_ledger_without_batch_offsets_cannot_be_replayed() -> None:
    with pytest.raises(ReplayImpossibleError, match="does not record the offsets of batches"):
        plan_for(1, {"0": 0}, [txn(2, {1: {"0": 5}}, record_ends=False)])


def test_batches_that_do_not_form_a_chain_are_refused() -> None:
    with pytest.raises(ReplayImpossibleError, match="do not form one chain"):
        plan_for(1, {"0": 0, "1": 0}, [txn(2, {1: {"0": 5, "1": 9}, 2: {"0": 6, "1": 2}})])


def test_covers_splits_replayed_new_and_diverged_batches() -> None:
    plan = plan_for(1, {"0": 0, "1": 0}, [txn(2, {1: {"0": 5, "1": 5}})])
    assert plan.covers({"0": 0, "1": 0}, {"0": 5, "1": 5})
    assert not plan.covers({"0": 5, "1": 5}, {"0": 9, "1": 5})
    with pytest.raises(ReplayDivergedError, match="crosses the end of the output already committed"):
        plan.covers({"0": 0, "1": 0}, {"0": 7, "1": 5})


def _offset_log(spark_dir: Path, batch: int, partitions: dict[str, int]) -> None:
    import json

    (spark_dir / "offsets").mkdir(parents=True, exist_ok=True)
    line = json.dumps({"partitions": partitions, "barrier": 0})
    (spark_dir / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{line}\n', encoding="utf-8")


def test_replayed_batches_are_not_staged_and_new_ones_commit_under_new_names(tmp_path: Path) -> None:
    """The sink side of a replay: the output committed before the restore stays once, the
    replayed batch is dropped, the new batch reusing an old batch id does not overwrite it."""
    out, spark_dir, control = tmp_path / "out", tmp_path / "spark", tmp_path / "control"
    ledger = TransactionLedger(LocalObjectStore(tmp_path / "store"), "p")
    staging = WriteAheadBatches(f"file://{out}/_staging")

    def sink(attempt: int) -> ParquetFileSink:
        return ParquetFileSink(path=f"file://{out}", name="out", pipeline="p", ledger=ledger, attempt=attempt,
                               spark_checkpoint=spark_dir)

    # First timeline: batches 0 and 1 committed in epoch 1 and 2.
    for batch, end, value in ((0, 5, "a"), (1, 9, "b")):
        _offset_log(spark_dir, batch, {"0": end})
        write_ahead_batch(staging.uri, batch, pa.table({"v": [value]}))
        sink(0).pre_commit_epoch(batch + 1, batch)
        sink(0).notify_checkpoint_complete(batch + 1, batch)
    assert ledger.get("out", 2).batch_ends == {1: {"0": 9}}
    # Restore checkpoint 1 (batch 0); epoch 2 (batch 1) is committed: replay it suppressed.
    plan = plan_for(1, {"0": 5}, [ledger.get("out", 2)])
    ControlChannel(control).set_replay_plan(plan)
    stager = WriteAheadWriter(staging.uri, mode="driver", control_dir=str(control), spark_checkpoint=str(spark_dir))

    class Frame:
        """What the stager uses of a DataFrame (the Spark path runs in the end-to-end tests)."""

        def __init__(self, value: str) -> None:
            self.value = value
            self.evaluated = False

        @property
        def write(self) -> Frame:
            return self

        def format(self, name: str) -> Frame:
            assert name == "noop"
            return self

        def mode(self, mode: str) -> Frame:
            return self

        def save(self) -> None:
            self.evaluated = True

        def toArrow(self) -> pa.Table:
            return pa.table({"v": [self.value]})

    _offset_log(spark_dir, 1, {"0": 9})
    replayed = Frame("b")
    stager(replayed, 1)  # replay of committed output: evaluated (state), output dropped
    assert replayed.evaluated
    _offset_log(spark_dir, 2, {"0": 12})
    stager(Frame("c"), 2)  # new output
    assert stager.suppressed == [1] and staging.batches() == [2]
    sink(1).pre_commit_epoch(3, 2)
    sink(1).notify_checkpoint_complete(3, 2)
    table = read_committed(f"file://{out}")
    assert table is not None and sorted(table.column("v").to_pylist()) == ["a", "b", "c"]


def test_an_unreadable_replay_plan_names_the_file_and_the_fix(tmp_path: Path) -> None:
    from barrierflow.errors import CheckpointCorruptError

    (tmp_path / "replay.json").write_text('{"restored_from": 3')
    with pytest.raises(CheckpointCorruptError, match=r"replay\.json.*run the restore again"):
        ControlChannel(tmp_path).replay_plan()

