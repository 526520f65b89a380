"""The Parquet file sink (local ``file://`` or ``s3://``): exactly-once through 2PC.

Layout under the sink's ``path``::

    part-<batch:012d>-a<attempt>-<n:05d>.parquet    committed output (what readers see)
    _staging/batch=<batch>/...           staged micro-batches (see :mod:`barrierflow.sinks.staging`)

Per epoch n (two-phase commit, :class:`~barrierflow.transactions.two_phase.TwoPhaseCommitSink`):
pre-commit has nothing to do externally (the staged batches are already durable and
invisible); commit moves each staged file of the epoch's batches to its deterministic final
name, so a repeated or resumed commit is a no-op (the name holds the transaction's attempt:
after a restore, batch ids are reused and must not overwrite earlier committed output);
abort leaves staged data to the next epoch or to the restore that discards it. Readers only
ever see ``part-*.parquet`` in the root; names starting with ``_`` are ignored by Spark and pyarrow.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from barrierflow.errors import SinkError
from barrierflow.storage import open_store
from barrierflow.transactions.ledger import Transaction
from barrierflow.transactions.staged import StagedBatches
from barrierflow.transactions.two_phase import TwoPhaseCommitSink, mid_commit_crash_point

log = logging.getLogger(__name__)
STAGING = "_staging"


def staging_uri(path: str) -> str:
    return f"{path.rstrip('/')}/{STAGING}"


def final_key(batch_id: int, attempt: int, index: int) -> str:
    return f"part-{batch_id:012d}-a{attempt}-{index:05d}.parquet"


class ParquetFileSink(TwoPhaseCommitSink):
    sink_type = "parquet"

    def __init__(self, *, path: str, **kwargs: Any) -> None:
        super().__init__(staging=StagedBatches(staging_uri(path)), **kwargs)
        self.path = path
        self.output = open_store(path)

    def begin_transaction(self, txn_id: str, checkpoint_id: int, batches: list[int]) -> dict[str, Any]:
        return {"path": self.path, "staging": self.staging.uri}

    def pre_commit(self, txn: Transaction) -> dict[str, Any]:
        return {"files": {str(b): [f["key"] for f in self.staging.listing(b)["files"]] for b in txn.batches}}

    def commit(self, txn: Transaction) -> None:
        step = 0
        for batch in txn.batches:
            keys = txn.handle.get("files", {}).get(str(batch), [])
            for index, key in enumerate(keys):
                target = final_key(batch, txn.attempt, index)
                if self.staging.store.exists(key):
                    self._publish(key, target)
                    step += 1
                    mid_commit_crash_point(self.name, step)
                elif not self.output.exists(target):
                    raise SinkError(
                        f"staged file {self.staging.store.describe(key)} of batch {batch} is missing and was never "
                        f"published to {self.output.describe(target)}; restore a checkpoint before batch {batch}"
                    )

    def _publish(self, staged_key: str, target: str) -> None:
        src = f"{STAGING}/{staged_key}"
        self.output.move(src, target)

    def abort(self, txn: Transaction) -> None:
        return None


def read_committed(uri: str) -> Any:
    """The committed output as one pyarrow Table, or None (readers never see staged files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = open_store(uri)
    tables = [pq.read_table(io.BytesIO(store.get_bytes(o.key)))
              for o in store.list("part-") if o.key.endswith(".parquet")]
    return pa.concat_tables(tables) if tables else None
