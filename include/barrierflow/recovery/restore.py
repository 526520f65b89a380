"""Restoring a pipeline from a completed checkpoint.

:func:`restore_pipeline` is the one function that does it::

    manifest <- the chosen checkpoint (an id, or the latest completed one)
    if a sink already committed batches beyond the manifest's barrier offsets and duplicates
        are not accepted: plan a faithful replay of them with the output suppressed
        (barrierflow.barriers.replay_plan); refuse if the ledger cannot tell their offsets
    move the local Spark checkpoint aside (kept once, as spark-checkpoint.replaced)
    materialize the manifest's files into a fresh Spark checkpoint dir (sha256 checked)
    attempt <- attempt + 1; checkpoints newer than the manifest are abandoned
    for each sink: commit pre-committed epochs <= n, abort the rest (and external orphans),
        discard write-ahead batches after the barrier batch V (Spark replays them)
    clear the control channel and the snapshot directories, store the replay plan (or remove an old
        one); the job is ready: `run` resumes at V+1
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.atomic_files import replace_directory
from barrierflow.barriers.control import ControlChannel
from barrierflow.barriers.replay_plan import ReplayImpossibleError, ReplayPlan
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointNotFoundError, UserInputError
from barrierflow.lease import JobLease
from barrierflow.spec.models import KafkaSourceSpec, StageSpec
from barrierflow.storage.object_dir import ObjectDir
from barrierflow.transactions.ledger import Transaction, TransactionLedger, TxnState
from barrierflow.transactions.two_phase import Decision, TwoPhaseCommitSink
from barrierflow.workdir.layout import JobLayout

log = logging.getLogger(__name__)


class DuplicateOutputError(UserInputError):
    """Restoring this checkpoint would produce already-committed output a second time."""


@dataclass
class RestoreReport:
    pipeline: str
    checkpoint_id: int
    spark_batch_id: int
    attempt: int
    files: int
    bytes: int
    abandoned: list[int] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    replaced: str | None = None
    replay: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "decisions"},
                "decisions": [d.as_dict() for d in self.decisions]}


def restore_pipeline(
    spec: StageSpec,
    checkpoint_id: int | None,
    *,
    store: CheckpointStore | None = None,
    layout: JobLayout | None = None,
    accept_duplicates: bool = False,
    check_running: bool = True,
) -> RestoreReport:
    """Restore ``spec``'s job from checkpoint ``checkpoint_id`` (None: the latest completed).

    Raises:
        CheckpointNotFoundError: no such completed checkpoint (exit code 2).
        CheckpointCorruptError: a file is missing or altered (exit code 2), naming it.
        DuplicateOutputError: a newer epoch was already committed to a sink and its batches
            cannot be replayed faithfully (exit code 2).
        JobAlreadyRunningError: the job runs, or another restore or reconciliation is under
            way (with ``check_running``; the restore holds the job's lease while it works, so
            neither a job nor a reconciliation starts meanwhile).
    """
    store = store or CheckpointStore.for_spec(spec)
    layout = layout or JobLayout.for_spec(spec)
    if not check_running:  # the caller (the job itself) holds the lease
        return _restore(spec, checkpoint_id, store, layout, accept_duplicates)
    with JobLease(layout.work_dir, spec.name, "restore", store=store.objects) as lease:
        store.fence = lease.token
        try:
            return _restore(spec, checkpoint_id, store, layout, accept_duplicates)
        finally:
            store.fence = None


def _restore(spec: StageSpec, checkpoint_id: int | None, store: CheckpointStore, layout: JobLayout,
             accept_duplicates: bool) -> RestoreReport:
    from barrierflow.sinks.factory import build_sinks

    if checkpoint_id is None:
        manifest = store.latest()
        if manifest is None:
            raise CheckpointNotFoundError(
                f"pipeline {spec.name} has no completed checkpoint in {store.uri} to restore; run it first")
    else:
        if checkpoint_id in store.abandoned():
            raise CheckpointNotFoundError(
                f"checkpoint {checkpoint_id} of pipeline {spec.name} was abandoned by an earlier restore "
                "(its timeline was discarded); list valid ones with 'barrierflow checkpoints list SPEC'")
        manifest = store.get(checkpoint_id)
    txns = TransactionLedger(store.objects, spec.name).list()
    committed = [t for t in txns if t.state is TxnState.COMMITTED]
    refuse_torn_epochs(spec.name, txns, manifest.checkpoint_id)
    replay: ReplayPlan | None = None
    if not accept_duplicates:
        try:
            replay = ReplayPlan.for_restore(manifest.checkpoint_id,
                                            manifest.barrier_offsets.get(spec.source.name, {}), committed)
        except ReplayImpossibleError as exc:
            raise DuplicateOutputError(
                f"checkpoint {manifest.checkpoint_id} is older than output already committed: {exc}. Restore the "
                "latest checkpoint (--latest), or pass --accept-duplicates if writing that output again is what "
                "you want"
            ) from None
    if replay is not None and spec.source.kind == "spark_kafka":
        from barrierflow.sources.spark_kafka import refuse_replay

        assert isinstance(spec.source, KafkaSourceSpec)
        refuse_replay(spec.source, manifest.checkpoint_id)
    target = layout.spark_checkpoint
    restoring = layout.work_dir / "spark-checkpoint.restoring"
    shutil.rmtree(restoring, ignore_errors=True)
    layout.work_dir.mkdir(parents=True, exist_ok=True)
    materialized = materialize_checkpoint(store, manifest, restoring)  # verifies every file first
    replaced = None
    if isinstance(target, ObjectDir):
        upload_spark_checkpoint(restoring, target)
        shutil.rmtree(restoring, ignore_errors=True)
    else:
        kept = replace_directory(restoring, target, keep_old=target.parent / f"{target.name}.replaced")
        replaced = None if kept is None else str(kept)
    abandoned = [i for i in store.checkpoint_ids() if i > manifest.checkpoint_id]
    attempt = store.begin_attempt(abandoned, restored=manifest.checkpoint_id)
    decisions: list[Decision] = []
    for sink in build_sinks(spec, store, layout, attempt=attempt):  # each sink's in-doubt epochs, on its own
        if isinstance(sink, TwoPhaseCommitSink):
            decisions += sink.restore(manifest.checkpoint_id, manifest.spark_batch_id)
    control = ControlChannel(layout.control)
    control.reset()
    control.set_replay_plan(replay)
    if replay is not None:
        log.warning("committed output of epochs %s lies beyond checkpoint %d: %d batches are replayed with "
                    "their output suppressed", list(replay.epochs), manifest.checkpoint_id, len(replay.ends))
    shutil.rmtree(layout.snapshots, ignore_errors=True)
    log.info("restored checkpoint %d of %s at %s", manifest.checkpoint_id, spec.name,
             datetime.now(UTC).isoformat())
    return RestoreReport(spec.name, manifest.checkpoint_id, manifest.spark_batch_id, attempt,
                         materialized.files, materialized.bytes, abandoned, decisions, replaced,
                         replay.summary() if replay is not None else None)


def refuse_torn_epochs(pipeline: str, txns: list[Transaction], checkpoint_id: int) -> None:
    """Refuse to restore ``checkpoint_id`` when an epoch after it is committed by one sink of
    the stage and only pre-committed by another (a stop between two sinks' commits): the
    restore would abort the pre-committed one, and the replay would suppress that epoch's
    output for every sink, so the second sink would never get it. Restoring the newest
    checkpoint first commits it in every sink.

    Raises:
        DuplicateOutputError: naming the epoch, the sinks and the fix.
    """
    done = {t.checkpoint_id: t.sink for t in txns if t.state is TxnState.COMMITTED and t.checkpoint_id > checkpoint_id}
    torn = sorted({(t.checkpoint_id, done[t.checkpoint_id], t.sink) for t in txns
                   if t.state is TxnState.PRECOMMITTED and t.checkpoint_id in done})
    if torn:
        epoch, committed_by, pending_in = torn[0]
        raise DuplicateOutputError(
            f"pipeline {pipeline}: epoch {epoch} is committed by sink {committed_by!r} but only pre-committed by "
            f"sink {pending_in!r} (the run stopped between the two commits), and checkpoint {checkpoint_id} lies "
            "before it: restoring it would leave that epoch out of the second sink. Restore the latest checkpoint "
            "first (--latest commits the epoch in every sink), then restore checkpoint "
            f"{checkpoint_id}")


def upload_spark_checkpoint(local: Path, target: ObjectDir) -> None:
    """Replace Spark's checkpoint on object storage with the materialized one at ``local``:
    every object below ``target`` is deleted, then every file of ``local`` uploaded, the offset
    and commit logs last (Spark starts from the newest ``commits/<V>`` it finds, so a restore
    interrupted before its end leaves no log that points at missing state; run it again). The
    old checkpoint is not kept aside: object storage has no rename."""
    removed = target.remove_tree()
    files = sorted((p for p in local.rglob("*") if p.is_file()),
                   key=lambda p: (("offsets", "commits").index(p.relative_to(local).parts[0]) + 1
                                  if p.relative_to(local).parts[0] in ("offsets", "commits") else 0, p.as_posix()))
    for path in files:
        target.store.put_file(path.relative_to(local).as_posix(), str(path))
    log.info("restored Spark checkpoint uploaded to %s (%d files; %d old objects removed)", target, len(files),
             removed)
