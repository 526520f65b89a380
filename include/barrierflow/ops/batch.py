"""The batch side of a pipeline (``barrierflow rollup``, ``barrierflow recompute``; the daily
rollup and recompute DAGs run them through spark-submit ``jobs/batch_job.py``), and the
reports they store (:func:`stored_report`).

It works on a Parquet lake and its 2PC ledger, or an Iceberg or Delta table read as of a cut
(:class:`BatchTarget`): a single-stage pipeline's
sink, or, for a pipeline of several stages, one final stage's (``stage``: ``--stage NAME``;
optional when the pipeline has exactly one final stage with such a sink, see
:mod:`barrierflow.pipeline.final_stages`). A final stage is worked on through its derived
single-stage spec and its own checkpoint store (``<checkpoint.storage>/stages/<stage>``), where
its ledger, checkpoints and reports are; its recomputation replays every stage it depends on in
batch (:mod:`barrierflow.batch.stage_replay`).

A recomputation from a Kafka source reads it with Spark's Kafka batch source, whichever reader
the stream uses: the session gets the connector's jars (:func:`batch_jars`; a driver started by
spark-submit gets them as ``--jars``, as the recompute DAG passes them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from barrierflow.batch.recompute import (
    LEGACY_RECOMPUTE_REPORT_KEY,
    RECOMPUTE_REPORT_KEY,
    KafkaSources,
    Recomputation,
    RecomputeReport,
    comparison_obstacle,
    kafka_sources,
    not_compared,
    recompute_and_compare,
)
from barrierflow.batch.rollups import ROLLUP_REPORT_KEY, RollupReport, parse_day
from barrierflow.batch.rollups import rollup as rollup_days
from barrierflow.batch.stage_replay import kafka_source_stages, replay_final_stage, replay_order
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.pipeline.final_stages import batch_side
from barrierflow.pipeline.table_output import cut_checkpoints, lake_sink, table_sink
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.models import ParquetSinkSpec, StageSpec
from barrierflow.spec.stages import PipelineSpec
from barrierflow.transactions.ledger import TransactionLedger, TxnState

__all__ = ["REPORT_KEYS", "BatchTarget", "StoredReport", "batch_jars", "batch_target", "newest_output_epoch",
           "parse_day", "recompute", "report_keys", "rollup", "stored_report"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



@dataclass(frozen=True)
class BatchTarget:
    """What the batch side works on: ``spec`` and ``store`` are a single-stage pipeline's, or
    a final stage's derived spec and its own store; then ``pipeline`` is the whole pipeline,
    ``stage`` the final stage and ``stage_specs`` every stage's derived spec (for the replay)."""

    spec: StageSpec
    store: CheckpointStore
    spec_path: str
    pipeline: PipelineSpec | None = None
    stage: str | None = None
    stage_specs: dict[str, StageSpec] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The pipeline's name, with ``/<stage>`` for a final stage (for messages)."""
        return self.spec.name if self.pipeline is None else f"{self.pipeline.name}/{self.stage}"


def batch_target(spec_path: str | os.PathLike[str], stage: str | None = None) -> BatchTarget:
    """The lake the batch side of the spec at ``spec_path`` works on (nothing is read yet).

    Raises:
        SpecError: the spec does not load. UserInputError: ``stage`` given for a single-stage
            spec; FinalStageError (a UserInputError): for several stages, ``stage`` is not a
            final stage with a Parquet sink, or it is left out and there is not exactly one.
    """
    side = batch_side(load_any_spec(spec_path), stage, str(spec_path))
    return BatchTarget(side.spec, CheckpointStore.for_spec(side.spec), str(spec_path), side.pipeline, side.stage,
                       side.stage_specs)


def _kafka_sources(target: BatchTarget) -> KafkaSources:
    """The Kafka-fed source stages the recomputation of ``target`` reads again."""
    if target.pipeline is not None and target.stage is not None:
        return kafka_source_stages(target.pipeline, target.stage_specs, target.stage)
    return kafka_sources(target.spec, target.store)


def batch_jars(spec_path: str | os.PathLike[str], stage: str | None = None) -> list[str]:
    """The installed jars a batch job of the spec at ``spec_path`` (its final stage ``stage``)
    needs on its driver's class path from the start: Spark's Kafka connector when its
    recomputation reads a Kafka source again; empty otherwise (and for a spec the batch side
    refuses: the job says why).

    Raises:
        JvmArtifactError: a needed jar is not installed (naming ``make install``).
    """
    from barrierflow.errors import UserInputError
    from barrierflow.runtime.session import source_jars
    from barrierflow.sources.spark_kafka import JVM_SET

    try:
        needed = bool(_kafka_sources(batch_target(spec_path, stage)))
    except UserInputError:
        return []
    return source_jars([], [JVM_SET]) if needed else []


def _session(spark: SparkSession | None, target: BatchTarget, purpose: str, *, kafka: bool = False) -> SparkSession:
    if spark is not None:
        return spark
    from barrierflow.runtime.session import build_session
    from barrierflow.sources.spark_kafka import JVM_SET

    return build_session(target.spec.spark, app_name=f"barrierflow-{purpose}-{target.spec.name}",
                         jvm_sets=[JVM_SET] if kafka else [])


def rollup(spec_path: str | os.PathLike[str], *, day: date | None = None, tag: str = "", stage: str | None = None,
           spark: SparkSession | None = None) -> RollupReport:
    """Daily rollups of the committed output (:mod:`barrierflow.batch.rollups`) of the pipeline
    or of its final stage ``stage``; the report is stored in that store.

    Raises SpecError, UserInputError (no Parquet sink, no such final stage, missing columns) or
    StorageError."""
    target = batch_target(spec_path, stage)
    lake_sink(target.spec)  # before Spark starts: a pipeline without a lake is refused at once
    return rollup_days(_session(spark, target, "rollup"), target.spec, target.store, day=day, tag=tag)


def recompute(spec_path: str | os.PathLike[str], *, start: datetime | None = None, end: datetime | None = None,
              tag: str = "", stage: str | None = None, spark: SparkSession | None = None) -> RecomputeReport:
    """The stream-vs-batch comparison (:mod:`barrierflow.batch.recompute`) of the pipeline or of
    its final stage ``stage`` (recomputed by replaying its stages in batch,
    :mod:`barrierflow.batch.stage_replay`); differences are in the report, stored at
    ``reports/recompute-latest.json`` of the pipeline's (or the stage's) store.

    Raises SpecError, UserInputError (bad range, nothing committed, a source that cannot be
    re-read, no such final stage; StageReplayError: a cycle upstream of the stage or a
    transformation that reads a channel's broker columns) or StorageError."""
    target = batch_target(spec_path, stage)
    lake_sink(target.spec)  # before Spark starts: a pipeline without a lake is refused at once
    if target.pipeline is not None and target.stage is not None:
        replay_order(target.pipeline, target.stage)  # a cycle upstream is refused before Spark starts too
    if why := comparison_obstacle(target.spec):  # before Spark starts: nothing to read
        return not_compared(target.spec, target.store, RECOMPUTE_REPORT_KEY, why, tag=tag)
    kafka = _kafka_sources(target)
    session = _session(spark, target, "recompute", kafka=bool(kafka))
    replay: Recomputation | None = None
    if target.pipeline is not None and target.stage is not None:
        replay = partial(replay_final_stage, session, target.pipeline, target.stage_specs, target.stage,
                         spec_path=str(spec_path))
    return recompute_and_compare(session, target.spec, target.store, start=start, end=end, tag=tag,
                                 spec_path=str(spec_path), recompute=replay, kafka=kafka)


def newest_output_epoch(spec_path: str | os.PathLike[str], stage: str | None = None) -> int | None:
    """The checkpoint id of the newest epoch whose output the Parquet sink COMMITTED (2PC
    ledger) of the pipeline or of its final stage ``stage`` (an Iceberg or Delta table: the
    newest cut record), or None (none yet, or the sink is no lake). What the output asset's
    watcher polls: lists the ledger or the cut records, reads no output."""
    target = batch_target(spec_path, stage)
    table = table_sink(target.spec)
    if table is not None:
        return max(cut_checkpoints(target.store, table), default=None)
    sink = next((s for s in target.spec.sinks if isinstance(s, ParquetSinkSpec)), None)
    if sink is None:
        return None
    committed = [t.checkpoint_id for t in TransactionLedger(target.store.objects, target.spec.name).list(sink.name)
                 if t.state is TxnState.COMMITTED]
    return max(committed, default=None)


#: The stored reports of the batch side, by name: where each is written.
REPORT_KEYS = {"rollups": ROLLUP_REPORT_KEY, "recompute": RECOMPUTE_REPORT_KEY}
#: Where a report was written under an earlier name: read, after :data:`REPORT_KEYS`, when the
#: current key holds nothing (the comparison's report was ``reports/reconciliation-latest.json``).
LEGACY_REPORT_KEYS: dict[str, tuple[str, ...]] = {"recompute": (LEGACY_RECOMPUTE_REPORT_KEY,)}


@dataclass(frozen=True)
class StoredReport:
    """A stored report of the batch side: its JSON ``document`` and the ``key`` it was read from
    (a legacy key, see :data:`LEGACY_REPORT_KEYS`, when ``legacy``)."""

    key: str
    document: dict[str, Any]

    @property
    def legacy(self) -> bool:
        return self.key not in REPORT_KEYS.values()


def report_keys(name: str) -> tuple[str, ...]:
    """The keys the report ``name`` (``rollups`` or ``recompute``) is looked for at, in order:
    the one it is written to, then its legacy ones.

    Raises:
        ValueError: ``name`` is not a report of the batch side (the message names the known ones).
    """
    if name not in REPORT_KEYS:
        raise ValueError(f"no batch report named {name!r}; the batch reports are {sorted(REPORT_KEYS)}")
    return (REPORT_KEYS[name], *LEGACY_REPORT_KEYS.get(name, ()))


def stored_report(spec_path: str | os.PathLike[str], name: str, stage: str | None = None) -> StoredReport | None:
    """The stored report ``name`` (``rollups`` or ``recompute``) of the pipeline (or of its final
    stage ``stage``, in the stage's store): the document at the report's key, else at its first
    legacy key that holds one (:func:`report_keys`), else None. A legacy report is read as
    stored (it has the same fields).

    Raises:
        ValueError: an unknown ``name``. SpecError, UserInputError: as :func:`batch_target`.
        StorageError: the store cannot be read.
    """
    import json

    from barrierflow.storage.object_store import ObjectNotFoundError

    keys = report_keys(name)
    objects = batch_target(spec_path, stage).store.objects
    for key in keys:
        try:
            return StoredReport(key, json.loads(objects.get_bytes(key)))
        except ObjectNotFoundError:
            continue
    return None
