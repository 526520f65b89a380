"""Commits of completed checkpoints are retried with bounded exponential backoff, never skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SinkError
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import Transaction, TransactionLedger, TxnState
from barrierflow.transactions.retry import CommitRetry
from barrierflow.transactions.two_phase import TwoPhaseCommitSink
from barrierflow.transactions.write_ahead import WriteAheadBatches


class FlakySink(TwoPhaseCommitSink):
    """Commits fail while ``down`` is positive (one failure per call), like a database that is
    unreachable for a while; records every commit call and whether it was a recovery."""

    sink_type = "test"

    def __init__(self, down: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.down = down
        self.calls: list[tuple[str, bool]] = []
        self.visible: list[str] = []

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        return {}

    def commit(self, txn: Transaction) -> None:
        self._try(txn, recovering=False)

    def recover_and_commit(self, txn: Transaction) -> None:
        self._try(txn, recovering=True)

    def _try(self, txn: Transaction, *, recovering: bool) -> None:
        self.calls.append((txn.transaction_id, recovering))
        if self.down > 0:
            self.down -= 1
            raise SinkError("connection refused")
        if txn.transaction_id not in self.visible:  # idempotent
            self.visible.append(txn.transaction_id)

    def abort(self, txn: Transaction) -> None:
        return None


def _sink(tmp_path: Path, down: int, retry: CommitRetry) -> tuple[FlakySink, TransactionLedger]:
    ledger = TransactionLedger(LocalObjectStore(tmp_path / "store"), "p")
    staging = WriteAheadBatches(f"file://{tmp_path / 'staging'}")
    return FlakySink(down, name="db", pipeline="p", ledger=ledger, write_ahead=staging, commit_retry=retry), ledger


def test_backoff_doubles_up_to_the_maximum() -> None:
    assert CommitRetry(retries=6, initial=1.0, maximum=10.0).delays() == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert CommitRetry(retries=0).delays() == []
    with pytest.raises(ValueError, match="invalid commit retry policy"):
        CommitRetry(retries=2, initial=0.0)


def test_a_commit_that_fails_while_the_sink_is_down_is_retried_until_it_succeeds(tmp_path: Path) -> None:
    waits: list[float] = []
    sink, ledger = _sink(tmp_path, down=3, retry=CommitRetry(retries=5, initial=0.5, sleep=waits.append))
    sink.pre_commit_epoch(1, 0)
    sink.pre_commit_epoch(2, 0)
    sink.notify_checkpoint_complete(2, 0)
    # Epoch 1 failed three times, then committed (recovering); epoch 2 only after it, in order.
    assert sink.visible == ["bf.p.db.e1.a0", "bf.p.db.e2.a0"]
    assert [r for _, r in sink.calls] == [False, True, True, True, False]
    assert waits == [0.5, 1.0, 2.0]
    assert [t.state for t in ledger.list("db")] == [TxnState.COMMITTED, TxnState.COMMITTED]


def test_used_up_retries_raise_naming_the_sink_and_the_fix_and_keep_the_transaction(tmp_path: Path) -> None:
    waits: list[float] = []
    sink, ledger = _sink(tmp_path, down=10, retry=CommitRetry(retries=2, initial=0.1, sleep=waits.append))
    sink.pre_commit_epoch(1, 0)
    with pytest.raises(SinkError) as info:
        sink.notify_checkpoint_complete(1, 0)
    message = str(info.value)
    assert "sink 'db'" in message and "bf.p.db.e1.a0" in message and "3 attempt(s)" in message
    assert "barrierflow reconcile" in message and "connection refused" in message
    assert waits == [0.1, 0.2]
    # Never skipped: still pre-committed, and committed once the sink is back.
    assert [t.state for t in ledger.list("db")] == [TxnState.PRECOMMITTED]
    sink.down = 0
    sink.notify_checkpoint_complete(1, 0)
    assert sink.visible == ["bf.p.db.e1.a0"]
    assert [t.state for t in ledger.list("db")] == [TxnState.COMMITTED]


def test_the_spec_sets_the_policy_and_refuses_a_zero_backoff(tmp_path: Path) -> None:
    from barrierflow.errors import SpecError

    from tests.pipeline_specs import make_spec, spec_dict

    spec = make_spec(tmp_path, checkpoint={"storage": f"file://{tmp_path}/c", "sink_commit_retries": 2,
                                           "sink_commit_backoff": "250ms"})
    assert (spec.checkpoint.sink_commit_retries, spec.checkpoint.sink_commit_backoff) == (2, 0.25)
    from barrierflow.spec import parse_spec

    data = spec_dict(tmp_path, checkpoint={"storage": f"file://{tmp_path}/c", "sink_commit_backoff": "0s"})
    with pytest.raises(SpecError, match="sink_commit_backoff"):
        parse_spec(data)
