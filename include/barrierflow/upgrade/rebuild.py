"""Rebuilding one stage's state by replaying its input: the rewrite of a change whose stored keys
would change meaning (a window's size, the grouping keys, deduplication keys, a join, a value
column's type, a stateful operator added, removed or replaced).

No rewrite of stored rows can turn 10-second windows into 20-second ones: a 20-second window
needs records a 10-second window that was already emitted and evicted no longer holds. What the
new definition's state at the savepoint *is*, is known all the same: the state its query holds
after reading the same input. :func:`rebuild_state` computes it and puts it into a scratch copy
of the savepoint, so that the new spec resumes exactly where the old one stopped:

1. The savepoint S of the stage (its barrier batch V, barrier offsets B, the watermark ``W`` of
   batch V, Spark's ``batchWatermarkMs``) is materialized into a scratch directory (sha256
   checked; the store is only read).
2. **Replay.** The new spec's stage query runs over a fresh scratch checkpoint, its source
   reading every record from the first the pipeline read up to B in one batch (the source's
   :data:`~barrierflow.sources.planning.REPLAY_UNTIL` option; only a source kind that
   :attr:`~barrierflow.sources.registry.SourceKind.replays_input` can); a source whose input a
   broker retains (Kafka: :attr:`~barrierflow.sources.registry.SourceKind.retained_input`)
   reads the bounded range the new state needs instead, from the offsets
   :func:`barrierflow.upgrade.replay_range.plan_replay` locates (for windowed aggregations: the
   oldest window open at W, found with the broker's offsets-for-times; else the pipeline's first
   record) up to B (:data:`~barrierflow.sources.planning.REPLAY_FROM`), refused, before anything
   is read, when the broker no longer holds them. Its output is discarded
   (Spark's ``noop`` sink), no micro-batch run for a watermark alone. Nothing is evicted in
   that batch (its watermark is Spark's initial one), so the state holds every key of the
   input. Then batch 1 is planned by hand with the same offsets and the watermark W, and run:
   it reads nothing and evicts what the new definition would have evicted by batch V (a window
   ending at or before W), its output again discarded. The state now is the new definition's
   after batch V: every key still open at W, with every record of the input up to B in it.
3. **Transfer.** Batch V+1 is added to the copy of S with V's offsets (its watermark W), the
   copy's state directories replaced by the replay's operator metadata and schema files, and
   Spark's ``StateRewriter`` writes the replay's state (batch 1) as the copy's state version V+2,
   row by row as stored (barrierflow's JVM helper, ``transfer``); batch V+1 is committed and the
   new spec's stateful-operator fingerprint recorded. The new spec restarts at V+2: the batch
   ids, the offsets and the watermark go on from S's, and so does every sink's numbering.

What the output shows: the old definition's rows up to the savepoint, the new definition's from
it on; a key the new definition closes at or before W (a 20-second window that ended before the
savepoint) is not emitted, every later one is, once, with all its records (those before the
savepoint included). Records the old run dropped as late are counted in the rebuilt state (the
replay reads the whole input as one batch, in which nothing is late).

What it needs: a source whose input is replayable from the pipeline's first record (the
generator), or a Kafka source (barrierflow's reader) whose topic still holds the records the new
state needs; RocksDB state (Spark's rewriter reads and writes RocksDB column families), the
stage's shuffle partitions unchanged (rebuild and rescale in two upgrades), one source.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.snapshot import record_stateful_operators, select_files
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.spark import commit_log, offset_log
from barrierflow.state.rescale import RescaledCheckpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.pipeline.model import Stage

log = logging.getLogger(__name__)

__all__ = ["RebuildFailedError", "RebuildNotSupportedError", "rebuild_refusal", "rebuild_state"]

#: Spark's setting for micro-batches that run for a new watermark alone (off during the replay).
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
SHUFFLE = "spark.sql.shuffle.partitions"


class RebuildNotSupportedError(UserInputError):
    """The stage's state cannot be rebuilt by replay (the message names why and what to do)."""


class RebuildFailedError(BarrierflowError):
    """The replay or the transfer failed on the scratch copy (nothing in the store changed)."""


def rebuild_refusal(stage: Stage) -> str | None:
    """Why the state of ``stage`` (of the new spec) cannot be rebuilt by replay, or None."""
    from barrierflow.sources.registry import kind_named

    kind = kind_named(stage.source_type)
    if stage.source_type == "spark_kafka":
        return (f"stage {stage.name} reads Kafka with Spark's connector (reader: spark); rebuilding its state by "
                "replaying the retained records is made with barrierflow's Kafka reader, so it is not yet supported "
                "for reader: spark")
    if not kind.replays_input:
        what = "channels" if stage.source_type == "channel" else f"a {stage.source_type} source"
        return (f"stage {stage.name} reads {what}, whose records from the pipeline's first one cannot be read again "
                "exactly, so its state cannot be rebuilt by replaying them (a generator source can)")
    if stage.spec.spark.state_store != "rocksdb":
        return (f"stage {stage.name} keeps its state with the {stage.spec.spark.state_store} state store; a rebuild "
                "writes the replayed state with Spark's state rewriter, which writes RocksDB state only "
                "(spark.state_store: rocksdb)")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = next((x for x in text.splitlines() if "Exception" in x or "Error" in x),
                text.splitlines()[0] if text else type(exc).__name__)
    return line[:600]


def _run_replay_query(spark: SparkSession, stage: Stage, spec_path: str, checkpoint: Path,
                      options: dict[str, str]) -> None:
    """Start the new spec's stage query over ``checkpoint`` with the replay's reader options, its
    output discarded, and stop it once the source has nothing more (every planned batch run)."""
    from barrierflow.runtime.stage_query import build_stage_frame
    from barrierflow.sources.registry import kind_named

    kind = kind_named(stage.source_type)
    frame = build_stage_frame(spark, stage.spec, stage.layout, spec_path=spec_path, source_format=kind.format,
                              extra_options=options, read_input=kind.read)
    query = (frame.writeStream.outputMode(stage.spec.transformation.output_mode).format("noop")
             .option("checkpointLocation", str(checkpoint))
             .queryName(f"barrierflow_rebuild_{stage.name}_{int(time.time() * 1000)}")
             .trigger(processingTime="0 seconds").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def _replay(spark: SparkSession, stage: Stage, spec_path: str, directory: Path, until: dict[str, Any],
            watermark_ms: int, start: dict[str, int] | None = None) -> Path:
    """Steps 2 of the module docstring (``start``: the first offset per partition of a bounded
    replay, else the source's first); returns the replay's Spark checkpoint (state at batch 1)."""
    from barrierflow.barriers.offsets import SourceOffset
    from barrierflow.runtime.session import register_data_sources
    from barrierflow.sources.planning import REPLAY_FROM, REPLAY_UNTIL, PlanningOptions

    register_data_sources(spark)
    checkpoint = directory / "spark-checkpoint"
    options = {"control_dir": str(directory / "control"), "dead_letter_uri": "", "event_time_uri": "",
               "planning": PlanningOptions().to_json(), REPLAY_UNTIL: json.dumps(until)}
    if start is not None:
        options[REPLAY_FROM] = json.dumps(SourceOffset(dict(start)).to_json())
    kept = {key: spark.conf.get(key, None) for key in (NO_DATA_BATCHES, SHUFFLE)}
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        _run_replay_query(spark, stage, spec_path, checkpoint, options)
        if commit_log.latest_committed(checkpoint) != 0:
            raise RebuildFailedError(f"the replay of stage {stage.name} did not commit its one batch of input")
        # batch 1, planned by hand: no input, the savepoint's watermark (what is evicted by then)
        first = (checkpoint / "offsets" / "0").read_text(encoding="utf-8").split("\n")
        metadata = json.loads(first[1])
        metadata["batchWatermarkMs"] = watermark_ms
        (checkpoint / "offsets" / "1").write_text("\n".join([first[0], json.dumps(metadata), *first[2:]]),
                                                  encoding="utf-8")
        _run_replay_query(spark, stage, spec_path, checkpoint, options)
        if commit_log.latest_committed(checkpoint) != 1:
            raise RebuildFailedError(f"the replay of stage {stage.name} did not commit its eviction batch")
    finally:
        for key, value in kept.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    return checkpoint


def _metadata_only(source: Path, target: Path) -> None:
    """``target``'s state directory made the operators of ``source``'s, without any state: every
    ``_metadata`` directory (operator metadata, schema files) copied, nothing else."""
    shutil.rmtree(target / "state", ignore_errors=True)
    for meta in sorted((source / "state").rglob("_metadata")):
        if meta.is_dir():
            shutil.copytree(meta, target / meta.relative_to(source), dirs_exist_ok=True)


@contextmanager
def rebuild_state(spark: SparkSession, *, pipeline: str, stage: Stage, store: CheckpointStore, manifest: Manifest,
                  spec_path: str, fingerprint: list[dict[str, Any]], scratch: str | None = None
                  ) -> Iterator[RescaledCheckpoint]:
    """Rebuild the state of ``stage`` (the new spec's) at savepoint ``manifest`` (its part of the
    source cut, in ``store``) by replay (module docstring), record ``fingerprint`` (the new
    spec's) with it and yield the rebuilt copy (``repartition_seconds``: replay and transfer);
    the directory is deleted when the block ends.

    Raises:
        RebuildNotSupportedError: :func:`rebuild_refusal` names a reason, the savepoint's batch has
            other than one source, or the shuffle partitions changed (nothing is read).
        RetentionNotCoveredError: (a Kafka source) the broker no longer holds every record the new
            state needs (:func:`barrierflow.upgrade.replay_range.plan_replay`; nothing is read).
        CheckpointCorruptError: a file of the checkpoint is missing or altered in the store.
        RebuildFailedError: the replay or Spark's state transfer failed (its first message line).
    """
    from barrierflow.jvm.helper import value_columns_helper
    from barrierflow.sources.registry import kind_named

    where = f"stage {stage.name} of pipeline {pipeline}"
    refusal = rebuild_refusal(stage)
    if refusal is not None:
        raise RebuildNotSupportedError(f"{where}: {refusal}. Nothing was changed.")
    bounded = None
    if kind_named(stage.source_type).retained_input:
        from barrierflow.upgrade.replay_range import plan_replay

        bounded = plan_replay(stage, store, manifest, fingerprint, pipeline=pipeline)
        log.info("%s: the rebuild replays %s", where, bounded.describe())
    tmp = Path(tempfile.mkdtemp(prefix=f"rebuild-{stage.name}-{manifest.checkpoint_id}-", dir=scratch))
    try:
        started = time.perf_counter()
        done = materialize_checkpoint(store, manifest, tmp / "spark-checkpoint")
        materialized = time.perf_counter() - started
        root, batch = done.directory, manifest.spark_batch_id
        sources = offset_log.read_offsets(root, batch)
        if len(sources) != 1 or sources[0] is None:
            raise RebuildNotSupportedError(
                f"{where}: batch {batch} of savepoint {manifest.checkpoint_id} has {len(sources)} sources; a rebuild "
                "replays one. Nothing was changed.")
        metadata = offset_log.read_offset_metadata(root, batch)
        recorded = str(metadata.get("conf", {}).get(SHUFFLE, ""))
        from barrierflow.spark.session import shuffle_partitions

        wanted = shuffle_partitions(stage.spec.spark)
        if recorded and recorded != wanted:
            raise RebuildNotSupportedError(
                f"{where}: its shuffle partitions change too ({recorded} -> {wanted}); rebuilding the state and "
                "rescaling it in one upgrade is not yet supported: upgrade twice, once with the old shuffle "
                "partitions, then with the new. Nothing was changed.")
        started = time.perf_counter()
        try:
            replayed = _replay(spark, stage, spec_path, tmp / "replay", sources[0],
                               int(metadata.get("batchWatermarkMs", 0)), None if bounded is None else bounded.start)
        except BarrierflowError:
            raise
        except Exception as exc:
            raise RebuildFailedError(
                f"the replay of {where} for savepoint {manifest.checkpoint_id} failed on a scratch copy: "
                f"{_first_line(exc)}; nothing in the checkpoint store changed") from None
        (root / "offsets" / str(batch + 1)).write_bytes((root / "offsets" / str(batch)).read_bytes())
        _metadata_only(replayed, root)
        if (replayed / "state").is_dir():  # else the new definition keeps no state: none is written
            helper = value_columns_helper(spark)
            try:
                helper.transfer(str(root), str(replayed), "1", str(batch + 1))
            except Exception as exc:
                raise RebuildFailedError(
                    f"Spark's state transfer of the replayed state of {where} into savepoint "
                    f"{manifest.checkpoint_id}'s copy failed: {_first_line(exc)}; nothing in the checkpoint store "
                    "changed") from None
        seconds = time.perf_counter() - started
        (root / "commits" / str(batch + 1)).write_bytes((root / "commits" / str(batch)).read_bytes())
        record_stateful_operators(root, fingerprint)
        if commit_log.latest_committed(root) != batch + 1:
            raise RebuildFailedError(f"the rebuild of savepoint {manifest.checkpoint_id} of {where} did not commit "
                                     f"batch {batch + 1}; nothing in the store changed")
        operators = [p for p in (root / "state").iterdir() if p.name.isdigit()] if (root / "state").is_dir() else []
        partitions = max((len([p for p in o.iterdir() if p.name.isdigit()]) for o in operators), default=0)
        files, bases = select_files(root, batch + 1, batch + 1)
        yield RescaledCheckpoint(root, batch + 1, partitions, files, bases, seconds, materialized)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
