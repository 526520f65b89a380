"""The ledger's listing reads only the entries that are new or changed since it last read them
(a sink lists its ledger at every checkpoint, and the ledger grows by one entry per checkpoint),
and never answers from an entry another writer replaced or deleted."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.storage.object_store import ObjectStore
from barrierflow.storage.uri import open_store
from barrierflow.transactions.ledger import TransactionLedger, TxnState


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(f"file://{tmp_path / 'store'}")
    return open_store(request.getfixturevalue("s3_store_uri"))


def _counting(store: ObjectStore, reads: list[str]) -> ObjectStore:
    get = store.get_bytes

    def counted(key: str) -> bytes:
        reads.append(key)
        return get(key)

    store.get_bytes = counted  # type: ignore[method-assign]
    return store


def _open(ledger: TransactionLedger, checkpoint_id: int) -> None:
    ledger.open(sink="out", sink_type="parquet", transaction_id=f"t{checkpoint_id}", checkpoint_id=checkpoint_id,
                attempt=1, batches=[checkpoint_id], handle={})


def test_a_listing_reads_only_new_or_changed_entries(store: ObjectStore) -> None:
    reads: list[str] = []
    ledger = TransactionLedger(_counting(store, reads), "p")
    for cid in (1, 2, 3):
        _open(ledger, cid)
    assert [t.checkpoint_id for t in ledger.list("out")] == [1, 2, 3] and len(reads) == 3
    reads.clear()
    assert [t.state for t in ledger.list("out")] == [TxnState.OPEN] * 3 and reads == []

    # Another writer (a reconcile in another process) moves entry 2 on and deletes entry 1.
    other = TransactionLedger(open_store(store.uri), "p")
    second = other.get("out", 2)
    assert second is not None
    other.transition(second, TxnState.ABORTED, note="by hand")
    other.delete(other.transition(other.get("out", 1), TxnState.ABORTED))  # type: ignore[arg-type]
    _open(ledger, 4)
    listed = ledger.list("out")
    assert [(t.checkpoint_id, t.state) for t in listed] == [
        (2, TxnState.ABORTED), (3, TxnState.OPEN), (4, TxnState.OPEN)]
    assert sorted(k.rsplit("/", 1)[-1] for k in reads) == ["txn-000000000002.json", "txn-000000000004.json"]
