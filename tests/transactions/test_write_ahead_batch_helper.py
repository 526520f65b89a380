"""barrierflow.testing.write_ahead_batch and its deprecated former name stage_batch."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from barrierflow.testing import stage_batch, write_ahead_batch
from barrierflow.transactions.write_ahead import WriteAheadBatches


def test_write_ahead_batch_writes_what_the_sinks_read(tmp_path: Path) -> None:
    batches = WriteAheadBatches(f"file://{tmp_path}")
    write_ahead_batch(batches.uri, 3, pa.table({"v": [1, 2, 3]}), files=2)
    assert batches.batches() == [3]
    assert len(batches.listing(3)["files"]) == 2
    assert batches.read(3).column("v").to_pylist() == [1, 2, 3]


def test_stage_batch_is_a_deprecated_alias(tmp_path: Path) -> None:
    batches = WriteAheadBatches(f"file://{tmp_path}")
    with pytest.warns(DeprecationWarning, match="write_ahead_batch"):
        stage_batch(batches.uri, 0, pa.table({"v": [7]}))
    assert batches.batches() == [0] and batches.read(0).column("v").to_pylist() == [7]
