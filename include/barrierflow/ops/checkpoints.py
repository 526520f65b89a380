"""List or show a pipeline's checkpoints (``barrierflow checkpoints list|show``), whatever its shape.

A pipeline's checkpoints are its cuts (see :mod:`barrierflow.pipeline.model`): for one stage,
its own checkpoints; for several, the global checkpoints (see
:mod:`barrierflow.checkpointing.global_manifest`), each with every stage's part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from barrierflow.checkpointing.global_manifest import GlobalFailure, GlobalManifest
from barrierflow.checkpointing.manifest import FailureRecord, Manifest
from barrierflow.pipeline.cut_view import CheckpointView, view
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.verification.report import load_report


@dataclass(frozen=True)
class Verdict:
    """The stored verification result of one cut (``barrierflow verify``, the verification
    DAG): every stage's report of that id, the cut passing only when each did (a cut some
    stage has no report for has no verdict; one stage: its checkpoint's report).

    Attributes:
        passed: no check failed. deep: every report came from deep verification with an
            expectation suite (without one, ``reason`` says the suite was skipped).
        reason: ``passed``, or what failed, each prefixed with its stage.
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
    mode, alignment, sync and async times and channel-state records), failed ones, the ids a
    restore abandoned, and each stage's own checkpoints in full.

    Attributes:
        noun: how messages name a cut (:attr:`barrierflow.pipeline.words.Words.cut_noun`).
        cuts: the completed cuts (abandoned ones too, flagged by ``abandoned``).
        failed_cuts: their failure records.
        stages: each stage's own manifests and failure records, in the spec's order (one stage:
            the pipeline's): the cuts' parts in full (kind, barrier batch, bytes).
        verdicts: cut id -> its stored verification result (:class:`Verdict`); ids never
            verified are absent.
        skipped: the cut manifests that could not be read (corrupt, truncated), left out of
            ``cuts``, each naming its file.
    """

    pipeline: str
    storage: str
    noun: str
    cuts: list[GlobalManifest]
    failed_cuts: list[GlobalFailure]
    abandoned: list[int]
    attempt: int
    stages: dict[str, StageCheckpoints]
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    skipped: list[SkippedRecord] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``checkpoints list --json``, one shape for every pipeline: ``pipeline``,
        ``storage``, ``noun``, ``attempt``, ``abandoned``, the cuts (``completed``, ``failed``)
        ``verification`` (cut id -> ``passed``, ``deep``, ``reason``; verified cuts only),
        ``skipped`` (``file``, ``reason``) and under ``stages`` each stage's own manifests and
        failure records (``completed``, ``failed``)."""
        return {"pipeline": self.pipeline, "storage": self.storage, "noun": self.noun,
                "attempt": self.attempt, "abandoned": self.abandoned,
                "completed": [m.model_dump(mode="json") for m in self.cuts],
                "failed": [f.model_dump(mode="json") for f in self.failed_cuts],
                "verification": {str(cid): v.as_dict() for cid, v in sorted(self.verdicts.items())},
                "skipped": [s.as_dict() for s in self.skipped],
                "stages": {name: stage.as_dict() for name, stage in self.stages.items()}}


@dataclass(frozen=True)
class StageCheckpoints:
    """One stage's own checkpoints: its manifests and failure records, ascending by id."""

    completed: list[Manifest]
    failed: list[FailureRecord]

    def manifest(self, checkpoint_id: int) -> Manifest | None:
        """Its manifest of cut ``checkpoint_id`` (None: it has none, e.g. deleted by retention)."""
        return next((m for m in self.completed if m.checkpoint_id == checkpoint_id), None)

    def as_dict(self) -> dict[str, Any]:
        return {"completed": [m.model_dump(mode="json") for m in self.completed],
                "failed": [f.model_dump(mode="json") for f in self.failed]}


def _verdict(pipeline: OpenedPipeline, checkpoint_id: int) -> Verdict | None:
    """Cut ``checkpoint_id``'s stored verdict (see :class:`Verdict`), or None."""
    reports = {s.name: load_report(s.store.objects, checkpoint_id) for s in pipeline.stages}
    done = {name: r for name, r in reports.items() if r is not None}
    if len(done) < len(reports):
        return None
    reason = "; ".join(f"{name}: {r.reason()}" for name, r in done.items() if not r.passed)
    # deep only when a suite checked the state: without one, the label does not say "(deep)"
    unchecked = "; ".join(f"{name}: {r.suite_skipped}" for name, r in done.items() if r.deep and r.suite_skipped)
    deep = all(r.deep for r in done.values()) and not unchecked
    return Verdict(not reason, deep, reason or (f"passed; {unchecked}" if unchecked else "passed"))


def listing(pipeline: OpenedPipeline) -> CheckpointListing:
    """The listing of an opened pipeline (see :func:`list_checkpoints`): a cut manifest that
    cannot be read is left out and named in ``skipped``."""
    cuts = pipeline.cuts
    completed, unreadable = cuts.readable_manifests()
    stages = {s.name: StageCheckpoints(s.store.completed(), s.store.failures()) for s in pipeline.stages}
    found = {m.checkpoint_id: _verdict(pipeline, m.checkpoint_id) for m in completed}
    return CheckpointListing(pipeline.name, pipeline.storage, words(pipeline).cut_noun, completed, cuts.failures(),
                             cuts.abandoned(), cuts.attempt(), stages,
                             {cid: v for cid, v in found.items() if v is not None},
                             [SkippedRecord(file, why) for file, why in unreadable])


def list_checkpoints(spec_path: str | os.PathLike[str]) -> CheckpointListing:
    """Read every completed cut, its verification verdict, and every failure record of the
    pipeline at ``spec_path``; manifests that do not parse are skipped and named.

    Raises:
        SpecError: the spec does not load. CheckpointCorruptError: a global failure record
            does not parse. StorageError: the store cannot be read.
    """
    return listing(open_pipeline(spec_path))


def show_checkpoint(spec_path: str | os.PathLike[str], checkpoint_id: int) -> CheckpointView:
    """Cut ``checkpoint_id`` and each stage's manifest (:func:`barrierflow.pipeline.cut_view.view`).

    Raises:
        CheckpointNotFoundError: it did not complete (or does not exist); the message says
            which it was. CheckpointCorruptError: its manifest does not parse.
    """
    return view(open_pipeline(spec_path), checkpoint_id)
