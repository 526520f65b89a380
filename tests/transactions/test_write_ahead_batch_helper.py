"""barrierflow.testing.write_ahead_batch: a write-ahead micro-batch without Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.write_ahead import WriteAheadBatches


def test_write_ahead_batch_writes_what_the_sinks_read(tmp_path: Path) -> None:
    batches = WriteAheadBatches(f"file://{tmp_path}")
    write_ahead_batch(batches.uri, 3, pa.table({"v": [1, 2, 3]}), files=2)
    assert batches.batches() == [3]
    assert len(batches.listing(3)["files"]) == 2
    assert batches.read(3).column("v").to_pylist() == [1, 2, 3]

