"""Verify a pipeline's cuts (``barrierflow verify``, the scheduled verification DAG), whatever its shape.

A cut of one stage is verified by the stage's structural (optionally deep) checks; a cut of
several stages as one consistent cut over every stage (:mod:`barrierflow.verification.global_cut`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.verification.global_cut import CutVerificationReport, select_cut_ids, verify_cuts
from barrierflow.verification.report import VerificationReport

#: How many failed checks the message of :meth:`VerifyOutcome.failure_message` lists.
MAX_LISTED_FAILURES = 10


@dataclass(frozen=True)
class VerifyOutcome:
    """Every cut verified, in order. ``noun``: how messages name a cut (``checkpoint`` of one
    stage, ``global checkpoint`` of several: :attr:`barrierflow.pipeline.words.Words.cut_noun`); ``causes``: the
    usual causes of a failure, as the pipeline's stores and inputs make them."""

    pipeline: str
    storage: str
    reports: list[CutVerificationReport]
    noun: str
    causes: str

    @property
    def failed(self) -> list[CutVerificationReport]:
        return [r for r in self.reports if not r.passed]

    @property
    def stage_reports(self) -> list[VerificationReport]:
        """Every stage's report of every cut, in order (what the HTML report shows)."""
        return [r for cut in self.reports for r in cut.stages.values()]

    def as_dict(self) -> dict[str, Any]:
        """The JSON document of ``barrierflow verify --json`` (also the scheduled verification's
        XCom), one shape for every pipeline: ``pipeline``, ``storage``, ``noun``, ``verified``,
        ``failed`` (ids) and ``reports``: each cut's (:meth:`CutVerificationReport.as_dict`:
        its own checks and each stage's stored report under ``stages``)."""
        return {"pipeline": self.pipeline, "storage": self.storage, "noun": self.noun, "verified": len(self.reports),
                "failed": [r.checkpoint_id for r in self.failed], "reports": [r.as_dict() for r in self.reports]}

    def failures(self) -> list[tuple[int, str, str, str | None]]:
        """``(cut id, check, message, file)`` of every failed check, oldest cut first (a
        check of a stage of several is named ``<stage>: <check>``)."""
        return [(r.checkpoint_id, c.name, c.message, c.file) for r in self.reports for c in r.failures]

    def failure_message(self, spec_path: str) -> str:
        """What the scheduled verification fails with (several lines): every failed cut and
        check (up to :data:`MAX_LISTED_FAILURES`), and what to do."""
        failed = [(r.checkpoint_id, _describe(c.name, {own.name for own in r.checks}), c.message, c.file)
                  for r in self.reports for c in r.failures]
        ids = sorted({cid for cid, _, _, _ in failed})
        lines = [f"{self.noun} {cid} failed {described}: {message}"
                 + (f" [{file}]" if file and file not in message else "")
                 for cid, described, message, file in failed[:MAX_LISTED_FAILURES]]
        if len(failed) > MAX_LISTED_FAILURES:
            lines.append(f"... and {len(failed) - MAX_LISTED_FAILURES} more failed checks (see the JSON summary)")
        return (
            f"pipeline {self.pipeline!r}: {len(ids)} of {len(self.reports)} verified {self.noun}s in {self.storage} "
            f"failed verification ({', '.join(f'{self.noun} {cid}' for cid in ids)}):\n  " + "\n  ".join(lines)
            + f"\nA failed {self.noun} cannot be trusted for a restore: 'barrierflow restore {spec_path} "
            f"--latest-valid' (and the recovery DAG's default checkpoint='latest-valid') skips it and retention no "
            f"longer keeps it. Look at it with 'barrierflow verify {spec_path} --checkpoint {ids[-1]}'; the usual "
            f"causes are {self.causes}.")


def _describe(name: str, own: set[str]) -> str:
    """A check of the cut itself (``own``, e.g. ``global-manifest``) -> ``"(check
    global-manifest)"``; a stage's check named by its stage (``"b: sha256"``, several stages) ->
    ``"(stage b, check sha256)"``; else (one stage, whose checks keep their names) ``"the
    sha256 check"``. The names are :attr:`CutVerificationReport.failures`'."""
    if name in own:
        return f"(check {name})"
    stage, sep, check = name.partition(": ")
    return f"(stage {stage}, check {check})" if sep else f"the {name} check"


def verify(spec_path: str | os.PathLike[str], *, checkpoint_id: int | None = None, latest: int | None = None,
           deep: bool = False) -> VerifyOutcome:
    """Verify one cut, the newest ``latest``, or every candidate; each stage's result is
    stored beside its checkpoint. A failed check is a result, not an error.

    Raises:
        SpecError: the spec does not load.
        CheckpointNotFoundError: ``checkpoint_id`` does not exist.
        UserInputError: ``latest`` is below 1.
        StorageError: the checkpoint store cannot be read.
    """
    pipeline = open_pipeline(spec_path)
    ids = select_cut_ids(pipeline.cuts, checkpoint_id, latest)
    reports = verify_cuts(pipeline.cuts, pipeline.stages, ids, deep=deep)
    said = words(pipeline)
    return VerifyOutcome(pipeline.name, pipeline.storage, reports, said.cut_noun, said.failure_causes)
