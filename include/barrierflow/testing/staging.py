"""Staging micro-batches without Spark, in the exact layout the Spark-side stager writes
(:mod:`barrierflow.sinks.staging`), for sink tests."""

from __future__ import annotations

import io
import json
from typing import Any

from barrierflow.storage import open_store
from barrierflow.transactions.staged import MARKER, batch_prefix


def stage_batch(uri: str, batch_id: int, table: Any, files: int = 1) -> None:
    """Stage ``table`` (pyarrow) as micro-batch ``batch_id`` in ``files`` task files."""
    import pyarrow.parquet as pq

    store = open_store(uri)
    listing = []
    step = max(1, -(-table.num_rows // files)) if table.num_rows else 1
    for task, lo in enumerate(range(0, max(table.num_rows, 1), step)):
        part = table.slice(lo, step)
        if part.num_rows == 0:
            continue
        buffer = io.BytesIO()
        pq.write_table(part, buffer)
        key = f"{batch_prefix(batch_id)}{task:05d}-test.parquet"
        store.put_bytes(key, buffer.getvalue())
        listing.append({"key": key, "rows": part.num_rows})
    store.put_bytes(batch_prefix(batch_id) + MARKER,
                    json.dumps({"batch_id": batch_id, "files": listing, "rows": table.num_rows}).encode())
