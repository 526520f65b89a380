"""List or show a pipeline's checkpoints (``barrierflow checkpoints list|show``), whatever its shape.

A pipeline's checkpoints are its cuts (see :mod:`barrierflow.pipeline.model`): for one stage,
its own checkpoints; for several, the global checkpoints (see
:mod:`barrierflow.checkpointing.global_manifest`), each with every stage's part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest, global_key
from barrierflow.checkpointing.global_store import SingleStageCuts
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.checkpointing.store import manifest_key
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.verification.report import load_report


@dataclass(frozen=True)
class Verdict:
    """The stored verification result of one cut (``barrierflow verify``, the verification
    DAG): one stage: its checkpoint's report; several: every stage's report of that id, the
    cut passing only when each did (a cut some stage has no report for has no verdict).

    Attributes:
        passed: no check failed. deep: every report came from deep verification.
        reason: ``passed``, or what failed (several stages: prefixed with the stage).
    """

    passed: bool
    deep: bool
    reason: str

    @property
    def label(self) -> str:
        """``passed``, ``passed (deep)`` or ``FAILED`` (``FAILED (deep)``), for the table."""
        return ("passed" if self.passed else "FAILED") + (" (deep)" if self.deep else "")

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "deep": self.deep, "reason": self.reason}


@dataclass(frozen=True)
class SkippedRecord:
    """A checkpoint record the listing could not read and left out: its full URI and why."""

    file: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "reason": self.reason}


@dataclass(frozen=True)
class CheckpointListing:
    """A pipeline's cuts, ascending by id: completed ones (their manifests carry each stage's
    mode, alignment, sync and async times and channel-state records), failed ones, and the ids
    a restore abandoned.

    Attributes:
        stages: the stages' names (one: the pipeline's).
        cuts: the completed cuts (several stages: abandoned ones too, flagged by ``abandoned``).
        failed_cuts: their failure records.
        manifests, failures: one stage only (else None): its own manifests and failure records,
            the cuts in full (kind, barrier batch, bytes), as ``checkpoints list`` prints them.
        verdicts: cut id -> its stored verification result (:class:`Verdict`); ids never
            verified are absent.
        skipped: the manifests that could not be read (corrupt, truncated), left out of
            ``cuts``, each naming its file.
    """

    pipeline: str
    storage: str
    stages: tuple[str, ...]
    cuts: list[GlobalManifest]
    failed_cuts: list[GlobalFailure]
    abandoned: list[int]
    attempt: int
    manifests: list[Manifest] | None = None
    failures: list[FailureRecord] | None = None
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    skipped: list[SkippedRecord] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints list --json``: for one stage its manifests and failure
        records (``completed``, ``failed``); for several the global ones, with ``attempt``
        and ``abandoned``. Both carry ``stages``, ``verification`` (cut id -> ``passed``,
        ``deep``, ``reason``; verified cuts only) and ``skipped`` (``file``, ``reason``)."""
        common = {"verification": {str(cid): v.as_dict() for cid, v in sorted(self.verdicts.items())},
                  "skipped": [s.as_dict() for s in self.skipped]}
        if self.manifests is not None and self.failures is not None:
            return {"pipeline": self.pipeline, "storage": self.storage, "stages": list(self.stages),
                    "completed": [m.model_dump(mode="json") for m in self.manifests],
                    "failed": [f.model_dump(mode="json") for f in self.failures], **common}
        return {"pipeline": self.pipeline, "storage": self.storage, "stages": list(self.stages),
                "attempt": self.attempt, "abandoned": self.abandoned,
                "completed": [m.model_dump(mode="json") for m in self.cuts],
                "failed": [f.model_dump(mode="json") for f in self.failed_cuts], **common}


def _verdict(pipeline: OpenedPipeline, checkpoint_id: int) -> Verdict | None:
    """Cut ``checkpoint_id``'s stored verdict (see :class:`Verdict`), or None."""
    reports = {s.name: load_report(s.store.objects, checkpoint_id) for s in pipeline.stages}
    if any(r is None for r in reports.values()):
        return None
    done = {name: r for name, r in reports.items() if r is not None}
    failed = [(name, r) for name, r in done.items() if not r.passed]
    reason = "; ".join(r.reason() if pipeline.single_stage else f"{name}: {r.reason()}" for name, r in failed)
    return Verdict(not failed, all(r.deep for r in done.values()), reason or "passed")


def listing(pipeline: OpenedPipeline) -> CheckpointListing:
    """The listing of an opened pipeline (see :func:`list_checkpoints`): a manifest that
    cannot be read is left out and named in ``skipped``, whatever the pipeline's shape."""
    names = tuple(s.name for s in pipeline.stages)
    cuts = pipeline.cuts
    skipped: list[SkippedRecord] = []
    if isinstance(cuts, SingleStageCuts):
        manifests: list[Manifest] = []
        for cid in cuts.store.checkpoint_ids():
            try:
                manifests.append(cuts.store.get(cid))
            except CheckpointCorruptError as exc:
                skipped.append(SkippedRecord(cuts.store.objects.describe(manifest_key(cid)), str(exc)))
            except CheckpointNotFoundError:  # deleted since it was listed (retention)
                continue
        completed = [cuts.cut_of(m) for m in manifests]
        return CheckpointListing(pipeline.name, pipeline.storage, names, completed, cuts.failures(),
                                 cuts.abandoned(), cuts.attempt(), manifests, cuts.store.failures(),
                                 _verdicts(pipeline, completed), skipped)
    completed = []
    for cid in cuts.ids("_metadata"):
        try:
            completed.append(cuts.get(cid))
        except CheckpointCorruptError as exc:
            skipped.append(SkippedRecord(cuts.objects.describe(global_key(cid, "_metadata")), str(exc)))
        except CheckpointNotFoundError:
            continue
    return CheckpointListing(pipeline.name, pipeline.storage, names, completed, cuts.failures(),
                             cuts.abandoned(), cuts.attempt(), verdicts=_verdicts(pipeline, completed),
                             skipped=skipped)


def _verdicts(pipeline: OpenedPipeline, completed: list[GlobalManifest]) -> dict[int, Verdict]:
    found = {m.checkpoint_id: _verdict(pipeline, m.checkpoint_id) for m in completed}
    return {cid: v for cid, v in found.items() if v is not None}


def list_checkpoints(spec_path: str | os.PathLike[str]) -> CheckpointListing:
    """Read every completed cut, its verification verdict, and every failure record of the
    pipeline at ``spec_path``; manifests that do not parse are skipped and named.

    Raises:
        SpecError: the spec does not load. CheckpointCorruptError: a global failure record
            does not parse. StorageError: the store cannot be read.
    """
    return listing(open_pipeline(spec_path))


@dataclass(frozen=True)
class CheckpointView:
    """One cut: its (for one stage: derived) global manifest and every stage's manifest."""

    manifest: GlobalManifest
    stages: dict[str, Manifest]
    single_stage: bool = False

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints show --json``: one stage: its manifest; several: the
        global manifest with ``stage_manifests``."""
        if self.single_stage:
            [manifest] = self.stages.values()
            return manifest.model_dump(mode="json")
        return {**self.manifest.model_dump(mode="json"),
                "stage_manifests": {name: m.model_dump(mode="json") for name, m in self.stages.items()}}


def view(pipeline: OpenedPipeline, checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` of an opened pipeline (see :func:`show_checkpoint`)."""
    manifest = pipeline.cuts.get(checkpoint_id)
    return CheckpointView(manifest, {s.name: s.store.get(checkpoint_id) for s in pipeline.stages},
                          pipeline.single_stage)


def show_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` and each stage's manifest.

    Raises:
        CheckpointNotFoundError: it did not complete (or does not exist); the message says
            which it was. CheckpointCorruptError: its manifest does not parse.
    """
    return view(open_pipeline(spec_path), checkpoint_id)
