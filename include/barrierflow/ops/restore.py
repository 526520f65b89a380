"""Choose a pipeline's cut and restore every stage to it, whatever the pipeline's shape.

The choice follows the one rule of :mod:`barrierflow.verification.choice` (the chosen cut is
verified first), whoever asks:

* ``barrierflow restore SPEC --latest | --latest-valid | --checkpoint N`` calls :func:`restore`,
  which chooses and restores under the pipeline's lease (no run, reconciliation or other
  restore can start in between);
* the recovery DAG calls :func:`choose` in one task and :func:`restore_chosen` in the next
  (its first task made sure the pipeline is stopped).

How each stage is restored is :mod:`barrierflow.recovery.pipeline_restore`'s (the one place
where a restore differs by the pipeline's shape); the outcome is one document for every
pipeline (:meth:`RestoreOutcome.as_dict`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.recovery.pipeline_restore import PipelineRestore, StageRestore, restore_to_cut
from barrierflow.recovery.restore import DuplicateOutputError
from barrierflow.verification.choice import CheckpointChoice, CheckpointRequest, choose_checkpoint

#: DuplicateOutputError is part of what :func:`restore_chosen` raises: the front doors catch it from here.
__all__ = ["DuplicateOutputError", "RestoreOutcome", "StageRestore", "choose", "restore", "restore_chosen"]


@dataclass(frozen=True)
class RestoreOutcome:
    """The cut chosen (and why) and what the restore did to each stage.

    Attributes:
        noun: how messages name the cut (:attr:`barrierflow.pipeline.words.Words.cut_noun`).
        stages: each stage's :class:`StageRestore`: its checkpoint's restore report (files,
            sink decisions, replay) and its attempt cutoff.
    """

    pipeline: str
    noun: str
    choice: CheckpointChoice
    attempt: int
    stages: dict[str, StageRestore]

    @property
    def checkpoint_id(self) -> int:
        return self.choice.checkpoint_id

    @property
    def abandoned(self) -> list[int]:
        """The newer cuts the restore abandoned (as the stages' restores report them)."""
        return sorted({c for s in self.stages.values() if s.report is not None for c in s.report.abandoned})

    @property
    def replay(self) -> dict[str, Any] | None:
        """The suppressed replay of already committed epochs, if a stage's restore planned one."""
        return next((s.report.replay for s in self.stages.values() if s.report is not None and s.report.replay), None)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``barrierflow restore --json`` (the recovery DAG's restore report), one
        shape for every pipeline: ``pipeline``, ``noun``, ``checkpoint_id``, ``attempt``,
        ``requested``, ``verification``, ``skipped``, ``abandoned``, ``decisions`` (every
        stage's sink decisions), ``replay`` (None or the replay plan's summary) and under
        ``stages`` each stage's restore report (``spark_batch_id``, ``files``, ``bytes``, ...,
        when its checkpoint was restored by itself) and ``cutoff``."""
        return {"pipeline": self.pipeline, "noun": self.noun, "checkpoint_id": self.checkpoint_id,
                "attempt": self.attempt, "requested": self.choice.requested,
                "verification": self.choice.verification,
                "skipped": [{"checkpoint_id": c, "reason": w} for c, w in self.choice.skipped],
                "abandoned": self.abandoned,
                "decisions": [d.as_dict() for s in self.stages.values() if s.report is not None
                              for d in s.report.decisions],
                "replay": self.replay,
                "stages": {name: s.as_dict() for name, s in self.stages.items()}}


def _outcome(name: str, noun: str, done: PipelineRestore) -> RestoreOutcome:
    return RestoreOutcome(name, noun, done.choice, done.attempt, done.stages)


def choose(spec_path: str | os.PathLike[str], requested: CheckpointRequest) -> CheckpointChoice:
    """The cut ``requested`` resolves to, verified first (see
    :func:`barrierflow.verification.choice.choose_checkpoint` for the rule and errors). Reads
    only the checkpoint store; restores nothing (the recovery DAG's ``choose_checkpoint``)."""
    return choose_checkpoint(open_pipeline(spec_path), requested)


def restore(spec_path: str | os.PathLike[str], requested: CheckpointRequest, *,
            accept_duplicates: bool = False) -> RestoreOutcome:
    """Choose the cut ``requested`` resolves to and restore every stage to it, holding the
    pipeline's lease throughout (module docstring); the next ``barrierflow run`` continues
    from there.

    Raises:
        UserInputError: ``accept_duplicates`` for a pipeline of several stages.
        JobAlreadyRunningError: the pipeline runs, or a restore or reconciliation is under way.
        CheckpointNotFoundError, ChosenCheckpointInvalidError: see :func:`choose`.
        CheckpointCorruptError, DuplicateOutputError: see
            :func:`barrierflow.recovery.restore.restore_pipeline` (and, several stages,
            :func:`barrierflow.recovery.cut_restore.restore_cut`, also ChannelRecordsLostError).
        EmbeddedBrokerError: several stages: the embedded broker did not start (also: the
            pipeline runs and holds its data dir).
    """
    pipeline = open_pipeline(spec_path)
    pipeline.refuse_accept_duplicates(accept_duplicates)
    return _outcome(pipeline.name, words(pipeline).cut_noun,
                    restore_to_cut(pipeline, requested, accept_duplicates=accept_duplicates))


def restore_chosen(spec_path: str | os.PathLike[str], checkpoint_id: int, *,
                   accept_duplicates: bool = False) -> RestoreOutcome:
    """Restore cut ``checkpoint_id``, chosen earlier by :func:`choose`. One stage: the restore
    re-checks every file's sha256 while it materializes them, under the job's lease; several:
    the cut is verified again under the pipeline's lease. Raises as :func:`restore`."""
    pipeline = open_pipeline(spec_path)
    pipeline.refuse_accept_duplicates(accept_duplicates)
    return _outcome(pipeline.name, words(pipeline).cut_noun,
                    restore_to_cut(pipeline, checkpoint_id, accept_duplicates=accept_duplicates, chosen=True))
