"""The one module of the Checkpoints page that reads library internals.

Everything the page shows comes from the pipeline's checkpoint store, through the functions
here: completed manifests of the current timeline, failure records, stored verification
results and the reports under ``reports/``. Keeping these imports in one place keeps the page
independent of where the library moves its modules.

Spec discovery and the cuts go through :mod:`barrierflow.ops` (the page is a front door, under
the ``front-doors-call-ops`` import contract): every pipeline's cuts (its checkpoints; of
several stages: its global checkpoints), each with every stage's part, are read through the
operation :func:`barrierflow.ops.cut_history.global_checkpoint_history`
(:func:`read_global_history`), whatever its shape. The reports are read from the store at the
root of ``checkpoint.storage``. The savepoints (:func:`read_savepoints`) and the recorded upgrades
(:func:`read_upgrades`: ``_upgrade.json`` and the kept history ``_upgrades/`` at that root) are
read through :mod:`barrierflow.ops` too.

Manifests name the barrier batch's time in the stage ``alignment_ms`` (format version 1) or
``barrier_batch_ms`` (after the rename): :func:`barrier_batch_ms` reads either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.cut_history import (
    GlobalCheckpointEntry,
    GlobalCheckpointHistory,
    RecordedUpgrade,
    SavepointEntry,
    StagePart,
    pipeline_savepoints,
    pipeline_upgrades,
)
from barrierflow.ops.cut_history import global_checkpoint_history as _global_checkpoint_history
from barrierflow.ops.cut_history import stage_verifications as _stage_verifications
from barrierflow.ops.discovery import DiscoveredPipeline, discover_pipelines
from barrierflow.pipeline.table_cut import COMMITTED, CutTable
from barrierflow.storage import ObjectNotFoundError
from barrierflow.verification.html import render_html
from barrierflow.verification.report import VerificationReport

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec

__all__ = [
    "COMMITTED",
    "CheckpointStore",
    "CutTable",
    "DiscoveredPipeline",
    "FailureRecord",
    "GlobalCheckpointEntry",
    "GlobalCheckpointHistory",
    "Manifest",
    "RecordedUpgrade",
    "SavepointEntry",
    "StagePart",
    "VerificationReport",
    "barrier_batch_ms",
    "find_pipelines",
    "open_checkpoint_store",
    "read_global_history",
    "read_report_object",
    "read_savepoints",
    "read_stage_verifications",
    "read_upgrades",
    "render_verification_html",
    "report_exists",
]


def find_pipelines(folder: str | os.PathLike[str]) -> list[DiscoveredPipeline]:
    """The pipeline specs in ``folder`` as the DAG file finds them (broken ones carry ``error``)."""
    return discover_pipelines(Path(folder))


def open_checkpoint_store(spec: PipelineSpec) -> CheckpointStore:
    """The checkpoint store at the root of the spec's ``checkpoint.storage`` (opening it reads
    nothing): where the pipeline-level reports are."""
    return CheckpointStore.for_spec(spec)  # type: ignore[arg-type]


def read_global_history(spec_path: str | os.PathLike[str], limit: int) -> GlobalCheckpointHistory:
    """The newest ``limit`` cuts of the spec at ``spec_path``, each with every stage's part
    (newest first); see :mod:`barrierflow.ops.cut_history`."""
    return _global_checkpoint_history(spec_path, limit=limit)


def read_savepoints(spec_path: str | os.PathLike[str]) -> list[SavepointEntry]:
    """The savepoints of the spec at ``spec_path``, oldest first; see
    :func:`barrierflow.ops.cut_history.pipeline_savepoints`."""
    return pipeline_savepoints(spec_path)


def read_upgrades(store: CheckpointStore) -> list[RecordedUpgrade]:
    """Every upgrade recorded in ``store`` (the root of ``checkpoint.storage``), newest first
    (the current unfinished one first), each its record or why it does not parse; see
    :func:`barrierflow.ops.cut_history.pipeline_upgrades`."""
    return pipeline_upgrades(store.objects)


def read_stage_verifications(spec_path: str | os.PathLike[str], checkpoint_id: int
                             ) -> dict[str, VerificationReport | None]:
    """Each stage's stored verification result of cut ``checkpoint_id`` (None: not verified),
    in stage order, for the spec at ``spec_path``."""
    return _stage_verifications(spec_path, checkpoint_id)


def render_verification_html(pipeline: str, reports: list[VerificationReport]) -> str:
    """The verification results as the self-contained HTML of ``barrierflow verify --html``."""
    return render_html(pipeline, reports)


def report_exists(store: CheckpointStore, key: str) -> bool:
    return store.objects.exists(key)


def read_report_object(store: CheckpointStore, key: str) -> bytes | None:
    """The bytes of the stored object ``key`` (a report under ``reports/``), or None if absent."""
    try:
        return store.objects.get_bytes(key)
    except ObjectNotFoundError:
        return None


def barrier_batch_ms(manifest: Manifest) -> float:
    """Barrier batch planned -> committed, in ms, whichever name the manifest uses."""
    for name in ("barrier_batch_ms", "alignment_ms"):
        value = getattr(manifest, name, None)
        if value is not None:
            return float(value)
    raise AttributeError(f"manifest of checkpoint {manifest.checkpoint_id} has neither barrier_batch_ms nor "
                         "alignment_ms; is the library newer than the Checkpoints page?")
