"""How far a pipeline got, cheaply enough to be polled (the asset watchers and the supervision
of the Airflow side).

For a multi-stage spec the checkpoints are the global ones: a checkpoint is completed when its
global manifest is stored (every stage's snapshot collected) and no restore abandoned it.
"""

from __future__ import annotations

import os
from datetime import datetime

from barrierflow.ops.pipeline import is_multi_stage, open_pipeline
from barrierflow.sinks.parquet import parquet_sink
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState


def newest_completed_checkpoint(spec_path: str | os.PathLike[str]) -> int | None:
    """The id of the newest completed checkpoint (manifest stored, not abandoned), or None; for
    a multi-stage spec, of the newest completed global checkpoint. Lists keys; reads no manifest."""
    if is_multi_stage(spec_path):
        from barrierflow.ops.global_checkpoints import open_staged

        ids = open_staged(spec_path).global_checkpoints()
    else:
        ids = open_pipeline(spec_path).store.checkpoint_ids()
    return ids[-1] if ids else None


def newest_completion_time(spec_path: str | os.PathLike[str]) -> datetime | None:
    """Completion time (timezone-aware) of the newest completed checkpoint, or None; for a
    multi-stage spec, of the newest completed global checkpoint (its global manifest's time:
    when the last stage's snapshot was collected)."""
    if is_multi_stage(spec_path):
        from barrierflow.ops.global_checkpoints import open_staged

        store = open_staged(spec_path).global_store
        ids = store.completed_ids()
        return store.get(ids[-1]).completion_time if ids else None
    completed = open_pipeline(spec_path).store.completed()
    return completed[-1].completion_time if completed else None


def newest_committed_epoch(spec_path: str | os.PathLike[str]) -> int | None:
    """The checkpoint id of the newest epoch whose output the Parquet sink COMMITTED (2PC
    ledger), or None (none yet, the sink is not Parquet, or the spec is multi-stage: its batch
    side is not built, see dags/barrierflow_pipelines.py)."""
    if is_multi_stage(spec_path):
        return None
    pipeline = open_pipeline(spec_path)
    if not isinstance(pipeline.spec.sink, ParquetSinkSpec):
        return None
    sink = parquet_sink(pipeline.spec)
    committed = [t.checkpoint_id for t in TransactionLedger(pipeline.store.objects, pipeline.name).list(sink.name)
                 if t.state is TxnState.COMMITTED]
    return max(committed, default=None)
