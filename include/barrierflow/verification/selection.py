"""The newest checkpoint that verifies: what ``restore --latest-valid`` restores.

:func:`latest_valid` walks the completed checkpoints of the current timeline, newest first::

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

import logging
from dataclasses import dataclass, field

from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointNotFoundError
from barrierflow.spec.models import PipelineSpec
from barrierflow.verification.report import load_report
from barrierflow.verification.runner import candidate_ids, verify_checkpoints
from barrierflow.verification.structural import structurally_intact

log = logging.getLogger(__name__)


@dataclass
class Selection:
    checkpoint_id: int
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (id, why), newest first


def latest_valid(spec: PipelineSpec, store: CheckpointStore) -> Selection:
    """The newest checkpoint whose structural verification passes (module docstring).

    Raises:
        CheckpointNotFoundError: no checkpoint passes; the message lists why each failed.
    """
    skipped: list[tuple[int, str]] = []
    for cid in reversed(candidate_ids(store)):
        stored = load_report(store.objects, cid)
        if stored is not None and stored.passed:
            intact, why = structurally_intact(store, cid)
            if intact:
                return Selection(cid, skipped)
            skipped.append((cid, f"verified earlier, but damaged since: {why}"))
            verify_checkpoints(spec, store, [cid])  # record the new verdict
            continue
        if stored is not None:
            skipped.append((cid, f"failed verification: {stored.reason()}"))
            continue
        report = verify_checkpoints(spec, store, [cid])[0]
        if report.passed:
            return Selection(cid, skipped)
        skipped.append((cid, f"failed verification: {report.reason()}"))
    for cid, why in skipped:
        log.warning("skipping checkpoint %d: %s", cid, why)
    detail = "; ".join(f"{cid}: {why}" for cid, why in skipped) or "there are no completed checkpoints"
    raise CheckpointNotFoundError(f"pipeline {spec.name} has no checkpoint that passes verification in "
                                  f"{store.uri} ({detail})")
