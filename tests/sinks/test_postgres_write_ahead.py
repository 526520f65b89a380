"""A PostgreSQL sink's micro-batches (insert mode) are written ahead as its COPY input by the
executors (or the driver in driver mode), so the pre-commit in the driver only streams bytes;
a batch with a column COPY input cannot carry stays rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.sinks.copy_rows import decoded, is_encoded, row_count
from barrierflow.sinks.write_ahead import CopyRows, WriteAheadWriter
from barrierflow.storage import open_store
from barrierflow.transactions.write_ahead import MARKER, WriteAheadBatches, batch_prefix

pytestmark = pytest.mark.spark

NAMES = ["ä", 'naïve "quoted" \\, comma', "😀 emoji\nnew line", "", None]


def _rows() -> list[tuple[Any, ...]]:
    return [(i, NAMES[i % len(NAMES)], datetime(2024, 5, 6, 7, 8, i % 60, tzinfo=UTC), i * 0.25) for i in range(40)]


@pytest.mark.parametrize("mode", ["executors", "driver"])
def test_a_postgres_sinks_batch_is_written_ahead_as_its_copy_input(spark: Any, tmp_path: Path, mode: str) -> None:
    uri = f"file://{tmp_path / 'wa'}"
    frame = spark.createDataFrame(_rows(), "id long, name string, at timestamp, x double").repartition(3)
    WriteAheadWriter(uri, mode, records=CopyRows("pg"))(frame, 0)
    table = WriteAheadBatches(uri).read(0)
    assert is_encoded(table) and row_count(table) == 40
    listing = json.loads(open_store(uri).get_bytes(batch_prefix(0) + MARKER))
    assert listing["rows"] == 40  # rows, not chunks of COPY input
    back = sorted(decoded(table).to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["name"], r["at"], r["x"]) for r in back] == _rows()


def test_a_batch_with_a_binary_column_stays_rows(spark: Any, tmp_path: Path) -> None:
    uri = f"file://{tmp_path / 'wa'}"
    frame = spark.createDataFrame([(1, b"\x00\xff"), (2, None)], "id long, payload binary")
    WriteAheadWriter(uri, records=CopyRows("pg"))(frame, 0)
    table = WriteAheadBatches(uri).read(0)
    assert not is_encoded(table)
    assert sorted(table.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "payload": b"\x00\xff"},
                                                                {"id": 2, "payload": None}]
