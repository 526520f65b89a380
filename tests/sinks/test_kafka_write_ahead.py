"""A Kafka sink's micro-batches are written ahead as its records, by the executors (or the driver
in driver mode): key and value bytes equal to the sink's encoding of each row, so the commit in
the driver only sends them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.errors import SinkError
from barrierflow.sinks.json_rows import KEY_COLUMN, VALUE_COLUMN, encode_value
from barrierflow.sinks.write_ahead import KafkaRecords, WriteAheadWriter
from barrierflow.transactions.write_ahead import WriteAheadBatches

pytestmark = pytest.mark.spark

#: Multi-byte UTF-8, a character outside the BMP, quotes and a backslash in the text.
NAMES = ["ä", "naïve \"quoted\" \\", "😀 emoji", "plain", None]


def _frame(spark: Any) -> Any:
    rows = [(i, NAMES[i % len(NAMES)], datetime(2024, 5, 6, 7, 8, i % 60, tzinfo=UTC)) for i in range(40)]
    return spark.createDataFrame(rows, "id long, name string, at timestamp").repartition(3)


def _expected(i: int) -> tuple[bytes | None, bytes]:
    name = NAMES[i % len(NAMES)]
    value = {"id": i, "name": name, "at": f"2024-05-06T07:08:{i % 60:02d}+00:00"}
    return (name.encode() if name is not None else None,
            json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


@pytest.mark.parametrize("mode", ["executors", "driver"])
def test_a_kafka_sinks_batch_is_written_ahead_as_its_records(spark: Any, tmp_path: Path, mode: str) -> None:
    uri = f"file://{tmp_path / 'wa'}"
    WriteAheadWriter(uri, mode, records=KafkaRecords("out", "name"))(_frame(spark), 0)
    table = WriteAheadBatches(uri).read(0)
    assert table.column_names == [KEY_COLUMN, VALUE_COLUMN]
    got = sorted(zip(table.column(KEY_COLUMN).to_pylist(), table.column(VALUE_COLUMN).to_pylist(), strict=True),
                 key=lambda kv: json.loads(kv[1])["id"])
    assert got == [_expected(i) for i in range(40)]
    # the same bytes the sink's own encoder gives the row
    assert got[1][1] == encode_value({"id": 1, "name": NAMES[1], "at": datetime(2024, 5, 6, 7, 8, 1, tzinfo=UTC)})


def test_a_key_column_the_query_does_not_write_is_refused_before_anything_is_written(spark: Any,
                                                                                     tmp_path: Path) -> None:
    uri = f"file://{tmp_path / 'wa'}"
    with pytest.raises(SinkError, match="Kafka sink 'out': key_column 'customer' is not a column of the rows the "
                                        r"query wrote \(columns: \['id', 'name', 'at'\]\); fix key_column"):
        WriteAheadWriter(uri, records=KafkaRecords("out", "customer"))(_frame(spark), 0)
    assert WriteAheadBatches(uri).batches() == []
