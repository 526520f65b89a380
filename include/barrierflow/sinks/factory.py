"""Building the driver-side sink of a spec, and where its micro-batches are staged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from barrierflow.spec.models import DiscardSinkSpec, KafkaSinkSpec, ParquetSinkSpec, PipelineSpec, PostgresSinkSpec
from barrierflow.transactions.committer import NoCommitter, SinkCommitter
from barrierflow.transactions.ledger import TransactionLedger
from barrierflow.transactions.retry import CommitRetry

if TYPE_CHECKING:
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.workdir.layout import JobLayout


def staging_uri_for(spec: PipelineSpec, layout: JobLayout) -> str | None:
    """The staging URI of the spec's sink, or None for sinks that stage nothing (discard)."""
    sink = spec.sink
    if isinstance(sink, DiscardSinkSpec):
        return None
    if isinstance(sink, ParquetSinkSpec):
        from barrierflow.sinks.parquet import staging_uri

        return staging_uri(sink.path)
    staging = getattr(sink, "staging_path", "") or f"file://{layout.work_dir / 'sink-staging' / sink.name}"
    return staging


def build_sink(spec: PipelineSpec, store: CheckpointStore, layout: JobLayout, *, attempt: int) -> SinkCommitter:
    sink = spec.sink
    if isinstance(sink, DiscardSinkSpec):
        return NoCommitter(sink.name)
    ledger = TransactionLedger(store.objects, spec.name)
    retry = CommitRetry(retries=spec.checkpoint.sink_commit_retries,
                        initial=spec.checkpoint.sink_commit_backoff,
                        maximum=max(30.0, spec.checkpoint.sink_commit_backoff))
    common = {"name": sink.name, "pipeline": spec.name, "ledger": ledger, "attempt": attempt,
              "spark_checkpoint": layout.spark_checkpoint, "commit_retry": retry,
              "fence": store.fence, "attempt_fence": store.attempt_fence()}
    if isinstance(sink, ParquetSinkSpec):
        from barrierflow.sinks.parquet import ParquetFileSink

        return ParquetFileSink(path=sink.path, **common)
    if isinstance(sink, PostgresSinkSpec):
        from barrierflow.sinks.postgres import PostgresSink

        staging = staging_uri_for(spec, layout)
        assert staging is not None
        return PostgresSink(spec=sink, staging_uri=staging, **common)
    if isinstance(sink, KafkaSinkSpec):
        from barrierflow.sinks.kafka import KafkaSink

        staging = staging_uri_for(spec, layout)
        assert staging is not None
        return KafkaSink(spec=sink, staging_uri=staging, **common)
    raise NotImplementedError(f"sink type {sink.type!r}")  # pragma: no cover - the spec union is closed
