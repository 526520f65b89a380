"""Whether ``restore --latest-valid`` may take a checkpoint of one stage.

The rule of :func:`barrierflow.verification.choice.choose_checkpoint` walks the candidates of
the current timeline, newest first, and asks :func:`judge` about each (a pipeline of one stage;
a cut of several stages is verified whole)::

    for n in completed checkpoints, newest first:
        result <- chk-<n>/_verification.json
        if result passed:  take n if it is still intact (manifest readable, every file
                           present with its size and sha256: a flipped byte keeps the
                           size), else skip (it was damaged after it was verified)
        if result failed:  skip, with the stored reason
        if no result:      run the structural verification now (and store it); take n if it
                           passes, else skip with the reason
    none left: CheckpointNotFoundError
"""

from __future__ import annotations

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec.models import StageSpec
from barrierflow.verification.report import load_report
from barrierflow.verification.runner import verify_checkpoints
from barrierflow.verification.structural import structurally_intact


def judge(spec: StageSpec, store: CheckpointStore, checkpoint_id: int) -> str | None:
    """Whether ``latest-valid`` may take ``checkpoint_id`` (module docstring): None if it may,
    else why it is skipped. A stored passing result is trusted once the checkpoint is still
    intact; a checkpoint never verified is verified now (and its result stored)."""
    stored = load_report(store.objects, checkpoint_id)
    if stored is not None and stored.passed:
        intact, why = structurally_intact(store, checkpoint_id)
        if intact:
            return None
        verify_checkpoints(spec, store, [checkpoint_id])  # record the new verdict
        return f"verified earlier, but damaged since: {why}"
    if stored is not None:
        return f"failed verification: {stored.reason()}"
    report = verify_checkpoints(spec, store, [checkpoint_id])[0]
    return None if report.passed else f"failed verification: {report.reason()}"
