"""The one rule for choosing the cut a restore starts from, whatever the pipeline's shape.

Every caller uses :func:`choose_checkpoint`: ``barrierflow restore``, the recovery DAG (through
:mod:`barrierflow.ops.restore`) and a job that starts without a local Spark checkpoint.
The rule: *the chosen cut is verified before anything is restored*::

    "latest-valid": the newest cut of the current timeline that passes verification; the
                    newer ones are skipped, each with why
    "latest":       the newest cut of the current timeline (for one stage a damaged
                    checkpoint, whose manifest is gone or unreadable, included: damage is
                    reported, never silently stepped over), then verified
    an id:          that cut (not abandoned by an earlier restore), then verified
    verification failed -> ChosenCheckpointInvalidError naming every failed check

What "verified" means is the cut's verification (:mod:`barrierflow.verification.global_cut`):
for a pipeline of one stage, whose cut ``n`` is its checkpoint ``n``, the stage's structural
checks (``latest-valid`` trusts a stored passing result once the checkpoint is still intact:
:func:`barrierflow.verification.selection.judge`); for several stages, every stage's checks
and the cut over the channels. Every verification result is stored beside its checkpoint
(``chk-<n>/_verification.json`` of the stage's store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from barrierflow.errors import CheckpointError, CheckpointNotFoundError, UserInputError
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS, OWN_CHECKPOINTS, CutLayout
from barrierflow.pipeline.model import OpenedPipeline
from barrierflow.pipeline.words import CUT_VERIFICATION, words

__all__ = ["CHECKPOINT_CHOICES", "CUT_VERIFICATION", "LATEST", "LATEST_VALID", "CheckpointChoice", "CheckpointRequest",
           "ChosenCheckpointInvalidError", "choose_checkpoint"]
from barrierflow.verification.global_cut import verify_cuts
from barrierflow.verification.runner import candidate_ids, select_ids
from barrierflow.verification.selection import judge

LATEST_VALID = "latest-valid"
LATEST = "latest"
#: What a checkpoint request accepts besides a positive checkpoint id.
CHECKPOINT_CHOICES = (LATEST_VALID, LATEST)

CheckpointRequest = int | Literal["latest-valid", "latest"]

class ChosenCheckpointInvalidError(CheckpointError, UserInputError):
    """The checkpoint asked for (by id, or as ``latest``) fails structural verification.

    Attributes:
        checkpoint_id: the checkpoint verified.
        failures: ``(check name, message)`` of every failed check.
    """

    def __init__(self, checkpoint_id: int, failures: list[tuple[str, str]], detail: str) -> None:
        self.checkpoint_id = checkpoint_id
        self.failures = failures
        super().__init__(detail)


@dataclass
class CheckpointChoice:
    """The cut to restore, and why.

    Attributes:
        requested: ``"latest-valid"``, ``"latest"`` or an id.
        checkpoint_id: the cut (checkpoint id) chosen.
        skipped: ``(checkpoint id, reason)`` of the newer cuts passed over, newest first
            (only ``latest-valid`` skips any).
        verification: the verdict on the chosen cut, one line.
        pipeline: the pipeline's name.
    """

    requested: CheckpointRequest
    checkpoint_id: int
    skipped: list[tuple[int, str]] = field(default_factory=list)
    verification: str = "passed"
    pipeline: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "requested": self.requested, "checkpoint_id": self.checkpoint_id,
                "skipped": [{"checkpoint_id": cid, "reason": why} for cid, why in self.skipped],
                "verification": self.verification}


class _OwnCheckpoints:
    """Choosing among the only stage's own checkpoints: damaged ones are candidates too (so that
    ``latest-valid`` names why it skipped them), and a cut is judged by the stage's structural
    checks."""

    @staticmethod
    def candidates(pipeline: OpenedPipeline) -> list[int]:
        return candidate_ids(pipeline.stages[0].store)

    @staticmethod
    def check_exists(pipeline: OpenedPipeline, checkpoint_id: int) -> None:
        select_ids(pipeline.stages[0].store, checkpoint_id=checkpoint_id)  # CheckpointNotFoundError if absent

    @staticmethod
    def skip_reason(pipeline: OpenedPipeline, checkpoint_id: int) -> str | None:
        stage = pipeline.stages[0]
        return judge(stage.spec, stage.store, checkpoint_id)


class _GlobalCheckpoints:
    """Choosing among the completed global checkpoints of the current timeline, each judged by
    the cut's checks and every stage's."""

    @staticmethod
    def candidates(pipeline: OpenedPipeline) -> list[int]:
        return pipeline.cuts.completed_ids()

    @staticmethod
    def check_exists(pipeline: OpenedPipeline, checkpoint_id: int) -> None:
        noun, name = words(pipeline).cut_noun, pipeline.name
        ids = pipeline.cuts.completed_ids()
        if not ids:
            raise CheckpointNotFoundError(f"pipeline {name!r} has no completed {noun} in {pipeline.storage} to restore")
        if checkpoint_id not in ids:
            raise CheckpointNotFoundError(f"{noun} {checkpoint_id} of pipeline {name!r} is not complete; "
                                          f"completed: {ids}")

    @staticmethod
    def skip_reason(pipeline: OpenedPipeline, checkpoint_id: int) -> str | None:
        report = verify_cuts(pipeline.cuts, pipeline.stages, [checkpoint_id])[0]
        return None if report.passed else f"failed verification: {report.reason()}"


#: How a cut is chosen, by where the pipeline keeps its cuts (:class:`~barrierflow.pipeline.model.CutLayout`).
_CHOOSERS: dict[CutLayout, type[_OwnCheckpoints] | type[_GlobalCheckpoints]] = {
    OWN_CHECKPOINTS: _OwnCheckpoints, GLOBAL_CHECKPOINTS: _GlobalCheckpoints}


def _candidates(pipeline: OpenedPipeline) -> list[int]:
    """The cuts ``latest`` and ``latest-valid`` pick from, ascending."""
    return _CHOOSERS[pipeline.layout].candidates(pipeline)


def _check_requested(pipeline: OpenedPipeline, checkpoint_id: int) -> None:
    """Raise CheckpointNotFoundError unless cut ``checkpoint_id`` may be restored."""
    noun, name = words(pipeline).cut_noun, pipeline.name
    if checkpoint_id in pipeline.cuts.abandoned():
        raise CheckpointNotFoundError(
            f"{noun} {checkpoint_id} of pipeline {name!r} was abandoned by an earlier restore (its timeline was "
            f"discarded) and cannot be restored; use checkpoint={LATEST_VALID!r} or an id from "
            f"'barrierflow checkpoints list {pipeline.spec_path}'")
    _CHOOSERS[pipeline.layout].check_exists(pipeline, checkpoint_id)


def _skip_reason(pipeline: OpenedPipeline, checkpoint_id: int) -> str | None:
    """None if ``latest-valid`` may take cut ``checkpoint_id``, else why it is skipped."""
    return _CHOOSERS[pipeline.layout].skip_reason(pipeline, checkpoint_id)


def choose_checkpoint(pipeline: OpenedPipeline, requested: CheckpointRequest) -> CheckpointChoice:
    """Resolve ``requested`` to a verified cut of ``pipeline`` (module docstring).

    Raises:
        CheckpointNotFoundError: no cut exists / none passes (``latest-valid``: the message
            lists why each failed), or the id does not exist or was abandoned by an earlier
            restore.
        ChosenCheckpointInvalidError: the requested cut fails a check; the message names the
            cut and each failed check (``<stage>: <check>`` for several stages) and suggests
            ``latest-valid``.
        StorageError: the checkpoint store cannot be read.
    """
    said = words(pipeline)
    noun, name, passed = said.cut_noun, pipeline.name, said.verified
    if requested == LATEST_VALID:
        skipped: list[tuple[int, str]] = []
        for cid in reversed(_candidates(pipeline)):
            why = _skip_reason(pipeline, cid)
            if why is None:
                return CheckpointChoice(requested, cid, skipped, said.newest_verified, name)
            skipped.append((cid, why))
        detail = "; ".join(f"{cid}: {why}" for cid, why in skipped) or f"there are no completed {noun}s"
        raise CheckpointNotFoundError(f"pipeline {name} has no {noun} that passes verification in "
                                      f"{pipeline.storage} ({detail})")
    if requested == LATEST:
        ids = _candidates(pipeline)
        if not ids:
            raise CheckpointNotFoundError(f"pipeline {name!r} has no completed {noun} in {pipeline.storage} "
                                          "to restore; the job never completed one")
        checkpoint_id = ids[-1]
    else:
        checkpoint_id = int(requested)
        _check_requested(pipeline, checkpoint_id)
    report = verify_cuts(pipeline.cuts, pipeline.stages, [checkpoint_id])[0]
    if not report.passed:
        listed = "; ".join(f"the {c.name} check: {c.message}" + (f" [{c.file}]" if c.file and c.file not in c.message
                                                                 else "")
                           for c in report.failures)
        raise ChosenCheckpointInvalidError(
            checkpoint_id, [(c.name, c.message) for c in report.failures],
            f"{noun} {checkpoint_id} of pipeline {name!r} (requested as checkpoint={requested!r}) fails "
            f"verification, so restoring it would fail or resume from damaged state: failed {listed}. "
            f"Use checkpoint={LATEST_VALID!r} to restore the newest {noun} that passes (the damaged ones are "
            "skipped and listed), or choose another id.",
        )
    return CheckpointChoice(requested, checkpoint_id, [], passed, name)
