"""Savepoints: user-owned checkpoints that retention never deletes.

Design: ``barrierflow savepoint SPEC [--checkpoint ID]`` *promotes* a completed checkpoint
(the latest one by default) to a savepoint by rewriting its manifest, atomically, with
``kind: savepoint``. Nothing else changes: same id, same files, same ledger entries, so a
savepoint restores exactly like the checkpoint it was (``restore --checkpoint ID``), and
the coordinator, which only ever writes manifests of new ids, never touches it. The job
takes a checkpoint every ``checkpoint.interval``, so the latest one is at most that old. A
fresh one is taken by ``barrierflow stop SPEC --savepoint`` (:mod:`barrierflow.ops.stop`): the
run triggers one more ordinary checkpoint, its sinks commit it, and it is promoted here, so
there is still one code path for the files.

The checkpoint must pass structural verification first. Retention keeps every savepoint
(of any timeline) and its ledger entries; after the promotion the files are checked again,
so a concurrent retention run that dropped the checkpoint before seeing the new kind is
reported instead of leaving a broken savepoint.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from barrierflow.checkpointing.manifest import CheckpointKind, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, SourceError
from barrierflow.spec.models import StageSpec
from barrierflow.verification.global_cut import refuse_unverifiable_cut, unreachable_inputs
from barrierflow.verification.runner import verify_checkpoints
from barrierflow.verification.source_range import RetainedStarts
from barrierflow.verification.structural import structurally_intact

if TYPE_CHECKING:
    from barrierflow.pipeline.model import OpenedPipeline

log = logging.getLogger(__name__)


def take_savepoint(spec: StageSpec, store: CheckpointStore | None = None,
                   checkpoint_id: int | None = None, *, starts: RetainedStarts | SourceError | None = None
                   ) -> Manifest:
    """Promote ``checkpoint_id`` (None: the latest completed) to a savepoint; returns the
    new manifest. ``starts``: the sources' retained ranges, or why they cannot be asked (see
    :func:`barrierflow.verification.runner.verify_checkpoints`; None asks the sources).

    Raises:
        CheckpointNotFoundError: no such (or no) completed checkpoint.
        CheckpointCorruptError: it fails structural verification, or was deleted meanwhile.
    """
    store = store or CheckpointStore.for_spec(spec)
    if checkpoint_id is None:
        latest = store.latest()
        if latest is None:
            raise CheckpointNotFoundError(f"pipeline {spec.name} has no completed checkpoint in {store.uri}; "
                                          "run it first")
        checkpoint_id = latest.checkpoint_id
    manifest = store.get(checkpoint_id)
    if manifest.kind is CheckpointKind.SAVEPOINT:
        return manifest
    report = verify_checkpoints(spec, store, [checkpoint_id], starts=starts)[0]
    if not report.passed:
        raise CheckpointCorruptError(f"checkpoint {checkpoint_id} cannot become a savepoint: it fails "
                                     f"verification ({report.reason()})")
    promoted = store.promote(checkpoint_id, CheckpointKind.SAVEPOINT)
    intact, why = structurally_intact(store, checkpoint_id)
    if not intact:
        raise CheckpointCorruptError(f"savepoint {checkpoint_id} lost files to a concurrent retention run "
                                     f"({why}); take a savepoint of a newer checkpoint")
    log.info("checkpoint %d of %s is now a savepoint", checkpoint_id, spec.name)
    return promoted


def promote_cut(pipeline: OpenedPipeline, checkpoint_id: int | None = None) -> int:
    """Promote cut ``checkpoint_id`` (None: the latest completed) of ``pipeline`` to a savepoint
    in every stage (``barrierflow savepoint``, a stop with ``--savepoint``, an upgrade's chaos
    runs): the cut is verified first (several stages: as one cut; every stage's checkpoint is
    verified by :func:`take_savepoint` itself). Running it again after an interruption finishes
    the promotion. Returns the cut's id.

    Raises:
        CheckpointNotFoundError: no (such) completed cut.
        CheckpointCorruptError: it fails verification (the message names the stage and check).
    """
    checkpoint_id = pipeline.completed_cut(checkpoint_id)
    # the cut's own checks; each stage's are the promotion's (take_savepoint)
    refuse_unverifiable_cut(pipeline.cuts, pipeline.stages, checkpoint_id, "become a savepoint")
    for stage in pipeline.stages:
        take_savepoint(stage.spec, stage.store, checkpoint_id, starts=unreachable_inputs(stage))
    return checkpoint_id
