"""The recent cuts of a pipeline (its global checkpoints; of one stage: its checkpoints), each
with every stage's part, as the Checkpoints page (:mod:`barrierflow.ui`) shows them.

One call reads, for the newest ``limit`` global checkpoints of the current timeline:

* the global record: the global manifest of a completed one (``global/chk-<n>/_metadata.json``)
  or the failure record of a failed one (``_failed.json``, with its trigger time from
  ``_triggered.json`` when that exists), through
  :class:`~barrierflow.checkpointing.global_store.GlobalCheckpointStore`;
* per stage, in the spec's stage order: what the global manifest recorded about the stage
  (:class:`~barrierflow.checkpointing.global_manifest.StageSnapshot`), the stage's own manifest
  (its ``alignment``: mode, alignment time, channel state and back-edge ranges) and the
  verification result stored beside it (``stages/<stage>/chk-<n>/_verification.json``, written
  by ``barrierflow verify``), and its sinks' freshness stored beside it by the run
  (``_freshness.json``, :mod:`barrierflow.runtime.freshness`);
* of a completed one, its lakehouse tables as the cut records say
  (:func:`barrierflow.pipeline.table_cut.cut_table_versions`).

Contract: read-only (nothing is written, no broker or Spark is needed, so it works on
pipelines whose channels are on the embedded broker); values are the stored ones, unchanged.
Completed global checkpoints a restore abandoned are left out, as ``checkpoints list`` leaves
abandoned checkpoints of one stage out; failure records are all shown (a restore's
``ABANDONED`` failures among them), except for ids that also have a global manifest. A stage
manifest that is missing or does not parse is ``None`` (the page shows the gap; ``verify``
says why), never an error.

:func:`pipeline_savepoints` lists a pipeline's savepoints, whatever its shape: the completed
cuts of the current timeline whose every stage's manifest is a savepoint (``kind: savepoint``,
the rule ``barrierflow upgrade`` picks its source savepoint by), oldest first; and
:func:`pipeline_upgrades` the upgrades recorded beside them (``barrierflow upgrade``'s record,
:mod:`barrierflow.upgrade.record`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest, StageSnapshot
from barrierflow.checkpointing.manifest import ChannelStateEntry, CheckpointKind, FailureRecord, Manifest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, UserInputError
from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.table_cut import CutTable, cut_table_versions
from barrierflow.pipeline.words import words
from barrierflow.storage import ObjectStore
from barrierflow.upgrade.record import RecordedUpgrade, recorded_upgrades
from barrierflow.verification.report import VerificationReport, load_report


@dataclass(frozen=True)
class StagePart:
    """One stage's part of one global checkpoint.

    Attributes:
        stage: the stage's name.
        snapshot: what the global manifest recorded about the stage (None: the global
            checkpoint did not complete).
        manifest: the stage's own manifest ``n`` (None: absent or unreadable).
        verification: the stage's stored verification result of ``n`` (None: never verified).
        failure: the stage's own failure record of ``n`` (None: none).
        freshness: each sink's freshness of ``n`` in seconds, as stored beside it once the sink
            committed (``chk-<n>/_freshness.json``; empty: none stored).
    """

    stage: str
    snapshot: StageSnapshot | None
    manifest: Manifest | None
    verification: VerificationReport | None
    failure: FailureRecord | None = None
    freshness: dict[str, float] = field(default_factory=dict)

    @property
    def channel_state(self) -> list[ChannelStateEntry]:
        """Every channel-state range the stage's manifest records (empty without alignment)."""
        alignment = self.manifest.alignment if self.manifest is not None else None
        return list(alignment.channel_state) if alignment is not None else []

    @property
    def back_edge_ranges(self) -> list[ChannelStateEntry]:
        """The channel-state ranges of partitions of a channel closing a cycle (``back_edge``)."""
        return [entry for entry in self.channel_state if entry.back_edge]

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage,
                "snapshot": self.snapshot.model_dump(mode="json") if self.snapshot else None,
                "manifest": self.manifest.model_dump(mode="json") if self.manifest else None,
                "verification": self.verification.model_dump(mode="json") if self.verification else None,
                "failure": self.failure.model_dump(mode="json") if self.failure else None,
                "freshness": dict(self.freshness)}


@dataclass(frozen=True)
class GlobalCheckpointEntry:
    """One global checkpoint: exactly one of ``manifest`` (completed) and ``failure`` is set."""

    checkpoint_id: int
    manifest: GlobalManifest | None
    failure: GlobalFailure | None
    trigger_time: datetime | None  # the manifest's, else the trigger record's (None: neither)
    stages: list[StagePart]
    #: the cut's lakehouse tables as its cut records say (:mod:`barrierflow.pipeline.table_cut`;
    #: empty for a failed one and for a pipeline without tables)
    tables: list[CutTable] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.manifest is not None


@dataclass(frozen=True)
class GlobalCheckpointHistory:
    """The newest cuts of a pipeline, newest first.

    ``total_completed`` and ``total_failed`` count every one of the current timeline, not only
    the ones in ``checkpoints``."""

    pipeline: str
    storage: str
    noun: str
    stages: tuple[str, ...]
    attempt: int
    checkpoints: list[GlobalCheckpointEntry]
    total_completed: int
    total_failed: int


def _stage_manifest(store: CheckpointStore, checkpoint_id: int) -> Manifest | None:
    try:
        return store.get(checkpoint_id)
    except (CheckpointNotFoundError, CheckpointCorruptError):
        return None


def global_checkpoint_history(spec_path: str | os.PathLike[str], *, limit: int | None = None
                              ) -> GlobalCheckpointHistory:
    """The newest ``limit`` (None: all) cuts of the spec at
    ``spec_path``, completed and failed, newest first, each with every stage's part (see the
    module docstring).

    Raises:
        SpecError: the spec does not load. UserInputError: ``limit`` is below 1.
        CheckpointCorruptError: a global record does not parse.
        StorageError: the checkpoint store cannot be read.
    """
    if limit is not None and limit < 1:
        raise UserInputError(f"limit must be at least 1, got {limit}")
    pipeline = open_pipeline(spec_path)
    cuts = pipeline.cuts
    completed = {m.checkpoint_id: m for m in cuts.completed()}
    failures = {f.checkpoint_id: f for f in cuts.failures() if f.checkpoint_id not in completed}
    newest = sorted(set(completed) | set(failures), reverse=True)
    shown = newest if limit is None else newest[:limit]
    stage_stores = [(s.name, s.store) for s in pipeline.stages]
    shown_ids = set(shown)
    stage_failures = {name: {f.checkpoint_id: f for f in store.failures() if f.checkpoint_id in shown_ids}
                      for name, store in stage_stores}
    entries = []
    for cid in shown:
        manifest = completed.get(cid)
        trigger = manifest.trigger_time if manifest else cuts.trigger_time(cid)
        parts = [StagePart(name, manifest.stages.get(name) if manifest else None, _stage_manifest(store, cid),
                           load_report(store.objects, cid), stage_failures[name].get(cid),
                           store.freshness(cid) if manifest else {})
                 for name, store in stage_stores]
        tables = cut_table_versions(pipeline.stages, cid) if manifest else []
        entries.append(GlobalCheckpointEntry(cid, manifest, failures.get(cid), trigger, parts, tables))
    return GlobalCheckpointHistory(pipeline.name, pipeline.storage, words(pipeline).cut_noun,
                                   tuple(name for name, _ in stage_stores),
                                   cuts.attempt(), entries, len(completed), len(failures))


@dataclass(frozen=True)
class SavepointEntry:
    """One savepoint of a pipeline (a completed cut whose every stage's manifest is a savepoint).

    Attributes:
        checkpoint_id: the cut's id (of one stage: its checkpoint id).
        attempt: the attempt that took it (the first stage's manifest).
        completion_time: the latest of its stages' completion times.
        barrier_batches: stage -> the barrier batch of its manifest, in stage order.
    """

    checkpoint_id: int
    attempt: int
    completion_time: datetime
    barrier_batches: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id, "attempt": self.attempt,
                "completion_time": self.completion_time.isoformat(), "barrier_batches": dict(self.barrier_batches)}


def pipeline_savepoints(spec_path: str | os.PathLike[str]) -> list[SavepointEntry]:
    """The savepoints of the spec at ``spec_path``, oldest first (module docstring). Read-only;
    a stage manifest that is missing or does not parse makes its cut no savepoint.

    Raises:
        SpecError: the spec does not load. StorageError: the checkpoint store cannot be read.
    """
    pipeline = open_pipeline(spec_path)
    found = []
    for cid in pipeline.cuts.completed_ids():
        manifests = [(s.name, _stage_manifest(s.store, cid)) for s in pipeline.stages]
        parts = [(name, m) for name, m in manifests if m is not None and m.kind is CheckpointKind.SAVEPOINT]
        if len(parts) != len(manifests) or not parts:
            continue
        found.append(SavepointEntry(cid, parts[0][1].attempt, max(m.completion_time for _, m in parts),
                                    {name: m.spark_batch_id for name, m in parts}))
    return found


def pipeline_upgrades(objects: ObjectStore) -> list[RecordedUpgrade]:
    """Every upgrade recorded at ``objects`` (the root of a pipeline's ``checkpoint.storage``),
    newest first (the current unfinished one first), each its record or why it does not parse
    (:func:`barrierflow.upgrade.record.recorded_upgrades`). Read-only.

    Raises:
        StorageError: the store cannot be read.
    """
    return recorded_upgrades(objects)


def stage_verifications(spec_path: str | os.PathLike[str], checkpoint_id: int) -> dict[str, VerificationReport | None]:
    """Each stage's stored verification result of global checkpoint ``checkpoint_id`` (None:
    that stage's checkpoint was never verified), in the spec's stage order. Read-only.

    Raises:
        SpecError: the spec does not load.
        StorageError: a stage's store cannot be read.
    """
    pipeline = open_pipeline(spec_path)
    return {s.name: load_report(s.store.objects, checkpoint_id) for s in pipeline.stages}
