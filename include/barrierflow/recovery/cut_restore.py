"""Restoring a pipeline of several stages to a cut: every stage to global checkpoint n.

:func:`restore_cut` is what ``barrierflow restore`` and every restart of a pipeline of several
stages run (a single-stage pipeline restores with :func:`barrierflow.recovery.restore.restore_pipeline`,
its cut being its checkpoint)::

    n <- the chosen completed global checkpoint (an id, or the newest)
    refuse if a final stage's sink committed an epoch newer than n (refuse_output_ahead)
    refuse if a channel no longer holds a barrier n record where a stage read it (check_cut_barriers)
    restore_pipeline(stage, n) for every stage (its 2PC sinks commit epochs <= n, abort the rest)
    attempt <- attempt + 1; newer global checkpoints are abandoned, unfinished ones fail (ABANDONED)
    record the attempt cutoff of every stage fed by channels: the offsets of its barrier n
        records, so its source skips what older attempts wrote after them (barriers/cutoffs.py)

:func:`restore_initial_cut` is the restart of a pipeline that ran but completed no global
checkpoint: every stage starts again from the beginning of its inputs as a new attempt.

Both take the pipeline's stages (:class:`barrierflow.pipeline.model.Stage`: derived spec,
store, layout, input partitions) and its :class:`GlobalCheckpointStore`; the caller holds the
pipeline's lease and has set its fencing token on the stage stores. The stages' channel
sources must name the brokers' real addresses (the barrier check reads them).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.global_manifest import GlobalFailure
from barrierflow.checkpointing.global_store import AttemptCutoffRecord, GlobalCheckpointStore, completed_cut
from barrierflow.pipeline.model import Stage
from barrierflow.spec.models import KafkaSourceSpec
from barrierflow.spec.stages import PipelineSpec
from barrierflow.storage.object_dir import ObjectDir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CutRestoreReport:
    """What a restore did: the cut restored (0: the initial cut), the new attempt, and the
    attempt cutoff of each stage fed by channels (input partition -> offset of its barrier)
    under ``cutoffs``."""

    pipeline: str
    checkpoint_id: int
    attempt: int
    cutoffs: dict[str, dict[str, int]]


def restore_cut(spec: PipelineSpec, stages: Sequence[Stage], cuts: GlobalCheckpointStore,
                checkpoint_id: int | None = None) -> CutRestoreReport:
    """Restore every stage to global checkpoint ``checkpoint_id`` (None: the newest); see the
    module docstring.

    Raises:
        CheckpointNotFoundError: no such completed global checkpoint.
        DuplicateOutputError: a stage's sink already committed a newer epoch (nothing changed).
        ChannelRecordsLostError: a channel's broker no longer holds a barrier record of the cut
            where a stage read it (nothing changed; :mod:`barrierflow.recovery.channel_barriers`).
        CheckpointCorruptError: a stage's checkpoint files are missing or altered.
    """
    from barrierflow.recovery.restore import restore_pipeline

    ids = cuts.completed_ids()
    checkpoint_id = completed_cut(cuts, spec.name, checkpoint_id)
    refuse_output_ahead(spec.name, stages, checkpoint_id)
    check_cut_barriers(spec, stages, checkpoint_id)
    for stage in stages:
        restore_pipeline(stage.spec, checkpoint_id, store=stage.store, layout=stage.layout, check_running=False)
    attempt = _begin_attempt(spec.name, cuts, [i for i in ids if i > checkpoint_id], checkpoint_id)
    cutoffs: dict[str, dict[str, int]] = {}
    for stage in stages:
        alignment = stage.store.get(checkpoint_id).alignment if stage.input_partitions else None
        if alignment is not None:
            cutoffs[stage.name] = dict(alignment.barrier_offsets)
    cuts.add_cutoff(AttemptCutoffRecord(attempt, checkpoint_id, cutoffs))
    log.warning("pipeline %s restored to global checkpoint %d (attempt %d)", spec.name, checkpoint_id, attempt)
    return CutRestoreReport(spec.name, checkpoint_id, attempt, cutoffs)


def restore_initial_cut(spec: PipelineSpec, stages: Sequence[Stage],
                        cuts: GlobalCheckpointStore) -> CutRestoreReport:
    """Restore the initial cut of a pipeline that ran but completed no global checkpoint
    (killed or stopped before its first one): every stage starts again from the beginning of
    its sources as a new attempt.

    Steps: each stage's local Spark checkpoint, snapshots and write-ahead output are removed and its
    own checkpoints (none belongs to a global one) abandoned; its 2PC sinks abort every
    unfinished transaction (none can be committed: final sinks commit only epochs of complete
    global checkpoints); unfinished global checkpoints fail (ABANDONED); the attempt increases;
    every stage fed by channels gets a cutoff at offset -1 of each input partition, so its source
    skips everything older attempts wrote. Idempotent: restoring again after a crash meanwhile
    only adds an attempt.
    """
    from barrierflow.sinks.factory import build_sinks
    from barrierflow.transactions.two_phase import TwoPhaseCommitSink

    for stage in stages:
        for path in (stage.layout.spark_checkpoint, stage.layout.snapshots):
            if isinstance(path, ObjectDir):
                path.remove_tree()
            else:
                shutil.rmtree(path, ignore_errors=True)
        stage_attempt = stage.store.begin_attempt(stage.store.checkpoint_ids())
        for sink in build_sinks(stage.spec, stage.store, stage.layout, attempt=stage_attempt):
            if isinstance(sink, TwoPhaseCommitSink):
                sink.restore(None, None)
        ControlChannel(stage.layout.control).reset()
    attempt = _begin_attempt(spec.name, cuts, [], 0)
    cutoffs = {stage.name: dict.fromkeys(sorted(stage.input_partitions), -1) for stage in stages
               if stage.input_partitions}
    cuts.add_cutoff(AttemptCutoffRecord(attempt, 0, cutoffs))
    log.warning("pipeline %s completed no global checkpoint before: every stage starts from the beginning as "
                "attempt %d", spec.name, attempt)
    return CutRestoreReport(spec.name, 0, attempt, cutoffs)


def refuse_output_ahead(pipeline: str, stages: Sequence[Stage], checkpoint_id: int) -> None:
    """Refuse to restore ``checkpoint_id`` when a sink committed a newer epoch: after the
    restore the upstream stages write those epochs' records again as a new attempt, at new
    channel offsets, so the single-stage replay with suppressed output (barriers/replay_plan.py)
    cannot cut the downstream batches where they were cut, and the output would be committed
    twice.

    Raises:
        DuplicateOutputError: naming the epochs per stage and what to do.
    """
    from barrierflow.recovery.restore import DuplicateOutputError
    from barrierflow.transactions.ledger import TransactionLedger, TxnState

    ahead = {}
    for stage in stages:
        newer = sorted(t.checkpoint_id for t in TransactionLedger(stage.store.objects, stage.spec.name).list()
                       if t.state is TxnState.COMMITTED and t.checkpoint_id > checkpoint_id)
        if newer:
            ahead[stage.name] = newer
    if ahead:
        raise DuplicateOutputError(
            f"global checkpoint {checkpoint_id} of pipeline {pipeline} is older than output already committed "
            f"(epochs per stage: {ahead}); a pipeline of several stages cannot replay committed epochs with their "
            "output suppressed, so restoring it would write that output twice. Restore the latest global "
            "checkpoint (--latest or --latest-valid), or remove the newer output first")


def check_cut_barriers(spec: PipelineSpec, stages: Sequence[Stage], checkpoint_id: int) -> None:
    """Refuse to restore ``checkpoint_id`` unless every stage fed by channels still finds its
    barrier ``checkpoint_id`` records at the offsets its manifest recorded (the barriers of the
    cut a savepoint rewritten by ``barrierflow upgrade`` was made from:
    :meth:`~barrierflow.checkpointing.manifest.AlignmentSummary.barrier_id`).

    Raises:
        ChannelRecordsLostError: see :func:`barrierflow.recovery.channel_barriers.check_barrier_records`.
    """
    from barrierflow.recovery.channel_barriers import check_barrier_records

    channels = {c.topic_for(spec.name): c.name for c in spec.channels}
    for stage in stages:
        alignment = stage.store.get(checkpoint_id).alignment if stage.input_partitions else None
        if alignment is not None:
            assert isinstance(stage.spec.source, KafkaSourceSpec)  # a channel stage reads its channels' topics
            check_barrier_records(stage.spec.source, stage=stage.name,
                                  checkpoint_id=alignment.barrier_id(checkpoint_id),
                                  barrier_offsets=alignment.barrier_offsets, channels=channels)


def _begin_attempt(pipeline: str, cuts: GlobalCheckpointStore, abandoned: list[int], restored: int) -> int:
    """Increase the pipeline's attempt, abandon ``abandoned`` global checkpoints and fail the
    unfinished ones (ABANDONED)."""
    attempt = cuts.root.begin_attempt(abandoned)
    for cid in cuts.unfinished_ids():
        cuts.record_failure(GlobalFailure(pipeline=pipeline, checkpoint_id=cid, reason="ABANDONED",
                                          message=f"unfinished when the pipeline was restored to {restored}",
                                          failure_time=datetime.now(UTC)))
    return attempt
