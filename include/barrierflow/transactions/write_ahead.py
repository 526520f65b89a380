"""Write-ahead micro-batches as the two-phase-commit template sees them (driver side).

The Spark side (:mod:`barrierflow.sinks.write_ahead`) writes each micro-batch V under a write-ahead
URI (the sink's write-ahead area), invisible to readers, the file list last::

    batch=<V:012d>/<task:05d>-<uuid>.parquet   one file per task
    batch=<V:012d>/_PRECOMMITTED.json          the batch's file list, written last

A batch is *written ahead* exactly when its file list exists. :class:`WriteAheadBatches`
lists, reads and discards write-ahead batches; a transaction
(:mod:`barrierflow.transactions.two_phase`) takes the write-ahead batches of an epoch and
deletes them only after it committed.

Words: 2PC says "write-ahead" for these batches and for the area they are written to (the
write-ahead area: a sink's ``write_ahead_path``, or ``_staging/`` below a Parquet sink's path;
``_staging/``, the ``barrierflow_staging`` writer and the handles' ``staging`` key are names stored
on disk and in Spark checkpoints, kept as written). "staged" names only a pipeline of several stages.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from barrierflow.errors import SinkError
from barrierflow.storage import ObjectNotFoundError, ObjectStore, open_store

MARKER = "_PRECOMMITTED.json"
_MARKER = re.compile(r"^batch=(\d+)/_PRECOMMITTED\.json$")
_BATCH = re.compile(r"^batch=(\d+)/")


def batch_prefix(batch_id: int) -> str:
    """The write-ahead prefix of micro-batch ``batch_id``."""
    return f"batch={batch_id:012d}/"


class WriteAheadBatches:
    """Reading and discarding write-ahead micro-batches (driver side)."""

    def __init__(self, uri: str, store: ObjectStore | None = None) -> None:
        self.uri = uri
        self.store = store or open_store(uri)

    def batches(self) -> list[int]:
        """Ids of write-ahead batches with a complete file list, ascending."""
        return sorted(int(m.group(1)) for o in self.store.list("batch=") if (m := _MARKER.match(o.key)))

    def listing(self, batch_id: int) -> dict[str, Any]:
        try:
            return json.loads(self.store.get_bytes(batch_prefix(batch_id) + MARKER))
        except ObjectNotFoundError:
            raise SinkError(
                f"write-ahead batch {batch_id} is gone from {self.store.describe(batch_prefix(batch_id))}; its output "
                "cannot be produced: restore a checkpoint at or before it"
            ) from None

    def read(self, batch_id: int) -> Any:
        """The rows of write-ahead batch ``batch_id`` as a pyarrow Table (None when empty)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        files = self.listing(batch_id)["files"]
        tables = [pq.read_table(io.BytesIO(self.store.get_bytes(f["key"]))) for f in files]
        return pa.concat_tables(tables) if tables else None

    def discard(self, batch_id: int) -> None:
        """Delete a batch's write-ahead prefix, the file list last."""
        keys = [o.key for o in self.store.list(batch_prefix(batch_id))]
        self.store.delete_many([k for k in keys if not k.endswith(MARKER)])
        self.store.delete(batch_prefix(batch_id) + MARKER)

    def discard_after(self, batch_id: int) -> list[int]:
        """Delete every write-ahead batch newer than ``batch_id``, complete or not; returns their ids."""
        newer = sorted({int(m.group(1)) for o in self.store.list("batch=")
                        if (m := _BATCH.match(o.key)) and int(m.group(1)) > batch_id})
        for batch in newer:
            self.discard(batch)
        return newer
