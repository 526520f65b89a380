"""Building the sinks of a stage: what writes each micro-batch of its query
(:func:`micro_batch_writer`: a channel writer, the write-ahead writer of a two-phase-commit sink,
one write-ahead writer per sink for a stage with several, or nothing for ``discard``), where
micro-batches are written ahead, and the driver-side committer of each sink (:func:`build_sinks`).

Every sink kind is resolved here, the ``channel`` kind included, so the runtime builds every
stage's writer the same way and never branches on the sink type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.spec.kafka_client import KafkaClientSpec
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.spec.models import (
    DiscardSinkSpec,
    KafkaSinkSpec,
    ParquetSinkSpec,
    PostgresSinkSpec,
    SinkSpec,
    StageSpec,
)
from barrierflow.transactions.committer import NoCommitter, SinkCommitter
from barrierflow.transactions.ledger import TransactionLedger
from barrierflow.transactions.retry import CommitRetry

if TYPE_CHECKING:
    import pyarrow as pa

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.lease import FenceToken
    from barrierflow.workdir.layout import JobLayout


@dataclass(frozen=True)
class ChannelOutput:
    """The channel a stage writes: the channel's brokers and topic, the writing stage (stamped
    on every record with the pipeline's attempt), the key column (None: keyless), and the
    channel's ``client`` settings (security, client options; None: PLAINTEXT)."""

    servers: str
    topic: str
    stage: str
    key_column: str | None = None
    client: KafkaClientSpec | None = None


def micro_batch_writer(spec: StageSpec, layout: JobLayout, *, fence: FenceToken | None,
                       channel: ChannelOutput | None = None, attempt: int = 0) -> Callable[[Any, int], None] | None:
    """The ``foreachBatch`` function of the stage whose derived spec is ``spec``: a
    :class:`~barrierflow.sinks.channel.ChannelWriter` when it writes ``channel`` (its records
    stamped with ``attempt``), a :class:`~barrierflow.sinks.write_ahead.WriteAheadWriter` for a
    two-phase-commit sink (checking ``fence`` before each write-ahead batch), a
    :class:`~barrierflow.sinks.write_ahead.WriteAheadWriters` writing each micro-batch ahead for
    every sink of a stage with several, None for ``discard`` (Spark's noop sink). A channel
    writer holds a producer: the caller closes it when the stage stops."""
    if channel is not None:
        from barrierflow.sinks.channel import ChannelWriter

        return ChannelWriter(servers=channel.servers, topic=channel.topic, stage=channel.stage,
                             attempt=attempt, spark_checkpoint=layout.spark_checkpoint,
                             key_column=channel.key_column, client=channel.client)
    from barrierflow.sinks.write_ahead import CopyRows, KafkaRecords, SinkRecords, WriteAheadWriter, WriteAheadWriters

    writers = []
    for sink in spec.sinks:
        write_ahead = write_ahead_uri_for(spec, layout, sink)
        if write_ahead is None:
            continue
        split_by = list(sink.partitioned_by) if isinstance(sink, IcebergSinkSpec | DeltaSinkSpec) else []
        records: SinkRecords | None = None
        if isinstance(sink, KafkaSinkSpec):
            records = KafkaRecords(sink.name, sink.key_column)
        elif isinstance(sink, PostgresSinkSpec) and sink.mode == "insert":  # an upsert applies rows one by one
            records = CopyRows(sink.name)
        writers.append(WriteAheadWriter(write_ahead, control_dir=str(layout.control),
                                        spark_checkpoint=str(layout.spark_checkpoint), fence=fence,
                                        split_by=split_by, records=records))
    if not writers:
        return None
    return writers[0] if len(writers) == 1 else WriteAheadWriters(writers)


def pipeline_and_stage(spec: StageSpec) -> tuple[str, str]:
    """The pipeline and stage names of the stage whose (derived) spec is ``spec``: a stage of a
    pipeline of several stages runs as ``<pipeline>-<stage>`` with work dir
    ``<pipeline work dir>/stages/<stage>`` (:func:`barrierflow.pipeline.stage_options.derive_stage_spec`);
    a single-stage pipeline is its own one stage."""
    from pathlib import PurePosixPath

    work = PurePosixPath(spec.work_dir.rstrip("/")) if spec.work_dir else None
    if work is not None and work.parent.name == "stages" and spec.name.endswith(f"-{work.name}"):
        return spec.name[: -len(work.name) - 1], work.name
    return spec.name, spec.name


def check_table_sink(spec: StageSpec, layout: JobLayout, output: pa.Schema) -> None:
    """Before the stage starts, for each of its sinks: create the table of an Iceberg sink from
    the query's ``output`` schema when absent, and check ``output`` against an existing Iceberg
    or Delta table; nothing for other sinks.

    Raises:
        UserInputError: the output does not fit a table (naming the sink and the column).
    """
    for sink in spec.sinks:
        if isinstance(sink, IcebergSinkSpec):
            from barrierflow.sinks.iceberg import ensure_iceberg_table, open_catalog, table_location

            catalog = open_catalog(sink.catalog, layout.work_dir)
            ensure_iceberg_table(sink, catalog, table_location(sink, layout.work_dir, catalog), output)
        elif isinstance(sink, DeltaSinkSpec):
            from barrierflow.sinks.delta import check_delta_table

            check_delta_table(sink, output)


def write_ahead_uri_for(spec: StageSpec, layout: JobLayout, sink: SinkSpec | None = None) -> str | None:
    """The write-ahead URI of ``sink`` (default: the spec's first sink), one of the spec's sinks,
    or None for sinks that write nothing ahead (discard)."""
    sink = sink if sink is not None else spec.sink
    if isinstance(sink, DiscardSinkSpec):
        return None
    if isinstance(sink, ParquetSinkSpec):
        from barrierflow.sinks.parquet import write_ahead_uri

        return write_ahead_uri(sink.path)
    if isinstance(sink, IcebergSinkSpec | DeltaSinkSpec):
        from barrierflow.sinks import table

        _, stage = pipeline_and_stage(spec)
        if isinstance(sink, DeltaSinkSpec):
            return table.write_ahead_uri(sink.path, stage, sink.name)
        from barrierflow.sinks.iceberg import table_location

        return table.write_ahead_uri(table_location(sink, layout.work_dir), stage, sink.name)
    uri = getattr(sink, "write_ahead_path", "") or f"file://{layout.work_dir / 'sink-staging' / sink.name}"
    return uri


def build_sinks(spec: StageSpec, store: CheckpointStore, layout: JobLayout, *, attempt: int) -> list[SinkCommitter]:
    """The driver-side committer of each of the spec's sinks, in the spec's order: they
    pre-commit every epoch together and commit it under the same checkpoint id (the
    coordinator pre-commits them in this order and commits them side by side)."""
    return [build_sink(spec, store, layout, attempt=attempt, sink=sink) for sink in spec.sinks]


def build_sink(spec: StageSpec, store: CheckpointStore, layout: JobLayout, *, attempt: int,
               sink: SinkSpec | None = None) -> SinkCommitter:
    """The driver-side committer of ``sink`` (default: the spec's first sink), one of the
    spec's sinks."""
    sink = sink if sink is not None else spec.sink
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

        write_ahead = write_ahead_uri_for(spec, layout, sink)
        assert write_ahead is not None
        return PostgresSink(spec=sink, write_ahead_uri=write_ahead, **common)
    if isinstance(sink, IcebergSinkSpec | DeltaSinkSpec):
        from barrierflow.sinks.cut import CutLog

        pipeline, stage = pipeline_and_stage(spec)
        table_kwargs = {**common, "stage": stage, "pipeline_name": pipeline, "cuts": CutLog(store.objects),
                        "commit_every": sink.commit_every}
        if isinstance(sink, IcebergSinkSpec) and sink.catalog.atomic:
            from barrierflow.sinks.iceberg_atomic import AtomicIcebergSink

            return AtomicIcebergSink(spec=sink, work_dir=layout.work_dir, **table_kwargs)
        if isinstance(sink, IcebergSinkSpec):
            from barrierflow.sinks.iceberg import IcebergSink

            return IcebergSink(spec=sink, work_dir=layout.work_dir, **table_kwargs)
        from barrierflow.sinks.delta import DeltaSink

        return DeltaSink(spec=sink, **table_kwargs)
    if isinstance(sink, KafkaSinkSpec):
        from barrierflow.sinks.kafka import KafkaSink

        write_ahead = write_ahead_uri_for(spec, layout, sink)
        assert write_ahead is not None
        return KafkaSink(spec=sink, write_ahead_uri=write_ahead, **common)
    raise NotImplementedError(f"sink type {sink.type!r}")  # pragma: no cover - the spec union is closed
