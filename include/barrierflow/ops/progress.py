"""How far a pipeline got, cheaply enough to be polled (the asset watchers and the supervision
of the Airflow side), whatever its shape.

A pipeline's checkpoints are its cuts: for one stage, its own checkpoints; for several, the
global ones (completed when the global manifest is stored, every stage's snapshot collected,
and no restore abandoned it). Each function takes the spec's path or a pipeline already opened
(:func:`barrierflow.pipeline.model.open_pipeline`), so a caller that needs more than one
answer loads the spec once.
"""

from __future__ import annotations

import os
from datetime import datetime

from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.sinks.parquet import parquet_sink
from barrierflow.spec.models import ParquetSinkSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState

__all__ = ["OpenedPipeline", "newest_committed_epoch", "newest_completed_checkpoint", "newest_completion_time",
           "open_pipeline"]

PipelineRef = str | os.PathLike[str] | OpenedPipeline


def _opened(pipeline: PipelineRef) -> OpenedPipeline:
    return pipeline if isinstance(pipeline, OpenedPipeline) else open_pipeline(pipeline)


def newest_completed_checkpoint(pipeline: PipelineRef) -> int | None:
    """The id of the newest completed cut (manifest stored, not abandoned), or None. Lists
    keys; reads no manifest."""
    ids = _opened(pipeline).cuts.completed_ids()
    return ids[-1] if ids else None


def newest_completion_time(pipeline: PipelineRef) -> datetime | None:
    """Completion time (timezone-aware) of the newest completed cut whose manifest reads, or
    None; for several stages its global manifest's time (when the last stage's snapshot was
    collected)."""
    newest = _opened(pipeline).newest_cut()
    return newest.completion_time if newest is not None else None


def newest_committed_epoch(pipeline: PipelineRef) -> int | None:
    """The checkpoint id of the newest epoch whose output the Parquet sink COMMITTED (2PC
    ledger), or None (none yet, the sink is not Parquet, or the pipeline has several stages:
    their batch side is not built, see dags/barrierflow_pipelines.py)."""
    opened = _opened(pipeline)
    if not opened.single_stage:
        return None
    [stage] = opened.stages
    if not isinstance(stage.spec.sink, ParquetSinkSpec):
        return None
    sink = parquet_sink(stage.spec)
    committed = [t.checkpoint_id for t in TransactionLedger(stage.store.objects, stage.spec.name).list(sink.name)
                 if t.state is TxnState.COMMITTED]
    return max(committed, default=None)
