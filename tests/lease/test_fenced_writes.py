"""Fenced writes without Spark: a holder whose lease was taken over completes no checkpoint and
decides no transaction, and the writes that straddle a takeover (check passed before the new
fence existed, write landed after) are harmless: a late manifest beyond the restore is
abandoned, a late commit decision collides with the restore's or is followed by it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.lease import FencedOffError, FenceToken, JobLease
from barrierflow.transactions.ledger import Transaction, TransactionLedger, TxnState, decision_key
from barrierflow.transactions.two_phase import TwoPhaseCommitSink
from barrierflow.transactions.write_ahead import WriteAheadBatches

from tests.verification.checkpoint_factory import CheckpointFactory


class RecordingSink(TwoPhaseCommitSink):
    """A 2PC sink whose external system is a list of what was made visible or discarded."""

    sink_type = "recording"

    def __init__(self, ledger: TransactionLedger, staging: WriteAheadBatches, fence: FenceToken | None,
                 effects: list[tuple[str, str]]) -> None:
        super().__init__(name="out", pipeline="t", ledger=ledger, write_ahead=staging, fence=fence)
        self.effects = effects

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        return {}

    def commit(self, txn: Transaction) -> None:
        self.effects.append(("commit", txn.transaction_id))

    def abort(self, txn: Transaction) -> None:
        self.effects.append(("abort", txn.transaction_id))


def _takeover(tmp_path: Path, objects: Any) -> tuple[FenceToken, FenceToken]:
    """Fence 1 (the old driver) and fence 2 (the restore that took its lease over)."""
    old = JobLease(tmp_path / "host-a", "t", store=objects)
    old.acquire()
    new = JobLease(tmp_path / "host-b", "t", "restore", store=objects)
    new.acquire()  # (the same process may take it again; across processes the TTL must pass first)
    assert old.token is not None and new.token is not None
    old.token.attempt = 0
    return old.token, new.token


def test_stale_driver_completes_no_checkpoint_and_a_late_manifest_is_abandoned(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    first, second = factory.take(2)
    objects = factory.store.objects
    stale, restorer = _takeover(tmp_path, objects)
    stale_store = CheckpointStore(objects, "t")
    stale_store.fence = stale
    with pytest.raises(FencedOffError, match=r"this driver \(attempt 0, fence 1\).* stops without completing "
                                             r"checkpoint 3"):
        stale_store.write_manifest(second.model_copy(update={"checkpoint_id": 3}))
    assert not objects.exists("chk-3/_metadata.json")

    restore = CheckpointStore(objects, "t")
    restore.fence = restorer
    assert restore.begin_attempt([], restored=second.checkpoint_id) == 1
    # The straddling write: the stale driver's check passed before fence 2 existed; its marker
    # and manifest land now, beyond the restored checkpoint 2.
    objects.put_bytes("_writers/chk-4.fence-1", b"")
    assert restore.add_manifest(second.model_copy(update={"checkpoint_id": 4}))
    assert restore.checkpoint_ids(include_abandoned=True) == [1, 2]
    assert restore.latest().checkpoint_id == 2  # type: ignore[union-attr]
    # The new attempt's own manifests beyond 2 count.
    restore.write_manifest(second.model_copy(update={"checkpoint_id": 5}))
    assert restore.checkpoint_ids() == [1, 2, 5]
    assert first.checkpoint_id == 1


def _sinks(tmp_path: Path) -> tuple[RecordingSink, RecordingSink, TransactionLedger, list[tuple[str, str]]]:
    factory = CheckpointFactory(tmp_path)
    objects = factory.store.objects
    ledger = TransactionLedger(objects, "t")
    staging = WriteAheadBatches(f"file://{tmp_path / 'staging'}")
    stale, restorer = _takeover(tmp_path, objects)
    effects: list[tuple[str, str]] = []
    return (RecordingSink(ledger, staging, stale, effects), RecordingSink(ledger, staging, restorer, effects),
            ledger, effects)


def _precommitted(ledger: TransactionLedger, checkpoint_id: int) -> Transaction:
    txn = ledger.open(sink="out", sink_type="recording", transaction_id=f"bf.t.out.e{checkpoint_id}.a0",
                      checkpoint_id=checkpoint_id, attempt=0, batches=[checkpoint_id], handle={})
    return ledger.transition(txn, TxnState.PRECOMMITTED)


def test_stale_commit_is_refused_before_any_effect(tmp_path: Path) -> None:
    stale, restore, ledger, effects = _sinks(tmp_path)
    _precommitted(ledger, 3)
    with pytest.raises(FencedOffError, match=r"stops without committing transaction bf\.t\.out\.e3\.a0"):
        stale.notify_checkpoint_complete(3, 3)
    with pytest.raises(FencedOffError, match="stops without pre-committing epoch 4"):
        stale.pre_commit_epoch(4, 4)
    assert effects == [] and not ledger.objects.exists(decision_key("out", 3))
    restore.restore(2, 2)  # epoch 3 is beyond the restored checkpoint: aborted by fence 2
    assert effects == [("abort", "bf.t.out.e3.a0")]
    assert json.loads(ledger.objects.get_bytes(decision_key("out", 3)))["fence"] == 2


def test_straddling_decisions_collide_and_the_first_one_stands(tmp_path: Path) -> None:
    stale, restore, ledger, effects = _sinks(tmp_path)
    # Epoch 3: the restore decided first (ABORT); the stale driver's late decision collides.
    txn3 = _precommitted(ledger, 3)
    restore.restore(2, 2)
    assert ledger.decide(txn3, "COMMIT", 1)["action"] == "ABORT"
    with pytest.raises(FencedOffError):
        stale._commit(txn3, recovering=False)
    # Epoch 5: the stale driver decided COMMIT first (its check passed before fence 2): the
    # restore follows that decision instead of aborting, so both never happen.
    txn5 = _precommitted(ledger, 5)
    assert ledger.decide(txn5, "COMMIT", 1)["action"] == "COMMIT"
    restore.restore(4, 4)
    assert effects == [("abort", "bf.t.out.e3.a0"), ("commit", "bf.t.out.e5.a0")]
    assert ledger.get("out", 5).state is TxnState.COMMITTED  # type: ignore[union-attr]
    assert ledger.get("out", 3).state is TxnState.ABORTED  # type: ignore[union-attr]


def test_a_batch_a_stale_driver_staged_after_the_restore_is_not_committed(tmp_path: Path) -> None:
    import pyarrow as pa
    from barrierflow.errors import SinkError
    from barrierflow.sinks.write_ahead import write_ahead_batch

    factory = CheckpointFactory(tmp_path)
    objects = factory.store.objects
    _stale, restorer = _takeover(tmp_path, objects)
    restore = CheckpointStore(objects, "t")
    restore.fence = restorer
    attempt = restore.begin_attempt([], restored=0)
    assert restore.attempt_fence() == 2
    ledger = TransactionLedger(objects, "t")
    staging = WriteAheadBatches(f"file://{tmp_path / 'staging'}")
    effects: list[tuple[str, str]] = []
    sink = RecordingSink(ledger, staging, restorer, effects)
    sink.attempt, sink.attempt_fence = attempt, restore.attempt_fence()
    write_ahead_batch(staging.uri, 0, pa.table({"v": [1]}), fence=2)  # this attempt's
    write_ahead_batch(staging.uri, 1, pa.table({"v": [2]}), fence=1)  # the stale driver's late write
    with pytest.raises(SinkError, match=r"write-ahead batch 1 .* was written under fence 1, by a driver fenced off by "
                                        r"the restore \(fence 2\) that began attempt 1"):
        sink.pre_commit_epoch(1, 1)
    assert ledger.list("out") == [] and effects == []
    staging.discard(1)
    assert sink.pre_commit_epoch(2, 1)[0]["batches"] == [0]
