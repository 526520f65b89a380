"""Run a pipeline's streaming job (``barrierflow run``, the launch DAG's spark-submit job)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from barrierflow.errors import UserInputError
from barrierflow.ops.pipeline import open_pipeline
from barrierflow.runtime.job import Progress, RunResult, StreamingJob
from barrierflow.sources.dead_letter import count_dead_letters

__all__ = ["Progress", "RunOutcome", "run"]


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run did: the job's result and the dead letters it left."""

    pipeline: str
    result: RunResult
    dead_letters: int
    dead_letter_uri: str


def run(spec_path: str | os.PathLike[str], *, duration: float | None = None, checkpoints: int | None = None,
        until_exhausted: bool = False, progress: Callable[[Progress], None] | None = None,
        progress_every: float = 1.0) -> RunOutcome:
    """Run the job until ``duration`` seconds passed, ``checkpoints`` completed or (with
    ``until_exhausted``) a bounded source is read to its end; see
    :meth:`barrierflow.runtime.job.StreamingJob.run` for the contract.

    Raises:
        UserInputError: ``duration`` or ``checkpoints`` is not positive; the job runs already.
        TolerableFailuresExceededError, JobFailedError: the job stopped on a failure.
    """
    if duration is not None and duration <= 0:
        raise UserInputError("--duration must be a positive number of seconds")
    if checkpoints is not None and checkpoints <= 0:
        raise UserInputError("--checkpoints must be a positive whole number")
    pipeline = open_pipeline(spec_path)
    job = StreamingJob(pipeline.spec, spec_path=pipeline.spec_path)
    result = job.run(duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                     progress=progress, progress_every=progress_every)
    dead_letter_uri = job.layout.dead_letter_uri(pipeline.spec)
    return RunOutcome(pipeline.name, result, count_dead_letters(dead_letter_uri), dead_letter_uri)
