"""Shared set-up of the lakehouse table sink tests (no Spark): write-ahead batches inside the
table's location, a ledger and cut records on a local checkpoint store."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger

PIPELINE = "lakep"


def rows(keys: list[int], region: str = "eu") -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()), "region": pa.array([region] * len(keys), pa.string()),
                     "total": pa.array([k * 10 for k in keys], pa.int64())})


def ledger(tmp_path: Path) -> TransactionLedger:
    return TransactionLedger(LocalObjectStore(tmp_path / "store"), PIPELINE)


def stage(staging_uri: str, batch: int, table: pa.Table, files: int = 1) -> None:
    write_ahead_batch(staging_uri, batch, table, files=files)
