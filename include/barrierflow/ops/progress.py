"""How far a pipeline got, cheaply enough to be polled (the asset watchers of the Airflow side)."""

from __future__ import annotations

import os

from barrierflow.ops.pipeline import open_pipeline
from barrierflow.sinks.parquet import parquet_sink
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState


def newest_completed_checkpoint(spec_path: str | os.PathLike[str]) -> int | None:
    """The id of the newest completed checkpoint (manifest stored, not abandoned), or None.
    Lists the store's ``chk-*`` keys; reads no manifest."""
    ids = open_pipeline(spec_path).store.checkpoint_ids()
    return ids[-1] if ids else None


def newest_committed_epoch(spec_path: str | os.PathLike[str]) -> int | None:
    """The checkpoint id of the newest epoch whose output the Parquet sink COMMITTED (2PC
    ledger), or None (none yet, or the sink is not Parquet)."""
    pipeline = open_pipeline(spec_path)
    if not isinstance(pipeline.spec.sink, ParquetSinkSpec):
        return None
    sink = parquet_sink(pipeline.spec)
    committed = [t.checkpoint_id for t in TransactionLedger(pipeline.store.objects, pipeline.name).list(sink.name)
                 if t.state is TxnState.COMMITTED]
    return max(committed, default=None)
