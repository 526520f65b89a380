"""Run a pipeline's streaming job (``barrierflow run``, the launch DAG's spark-submit job).

:func:`run` runs a single-stage spec, :func:`run_stages` a multi-stage one (every stage's
query and the pipeline coordinator in one process); :func:`barrierflow.ops.pipeline.is_multi_stage` tells them apart.
A multi-stage run starts the embedded broker (:mod:`barrierflow.sources.embedded_broker`)
for the run's duration when a channel's ``bootstrap`` is ``embedded``, with its data under
the pipeline's work dir (``<work_dir>/embedded-broker``), so the channels outlive the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from barrierflow.errors import UserInputError
from barrierflow.ops.pipeline import is_multi_stage, open_pipeline
from barrierflow.runtime.job import Progress, RunResult, StreamingJob
from barrierflow.runtime.pipeline import (
    PipelineProgress,
    PipelineRunResult,
    StagedPipelineJob,
    StageProgress,
    pipeline_work_dir,
)
from barrierflow.sources.dead_letter import count_dead_letters
from barrierflow.sources.embedded_broker import data_dir_for, embedded_broker
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.stages import StagedPipelineSpec
from barrierflow.workdir.lease import JobLease

__all__ = ["PipelineProgress", "Progress", "RunOutcome", "StageProgress", "StagedRunOutcome", "is_multi_stage",
           "run", "run_stage", "run_stages"]


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run did: the job's result and the dead letters it left."""

    pipeline: str
    result: RunResult
    dead_letters: int
    dead_letter_uri: str


@dataclass(frozen=True)
class StagedRunOutcome:
    """What a finished multi-stage run did; ``embedded_broker`` is the address of the broker
    started for ``bootstrap: embedded`` channels (None if none was), stopped once the run
    ended (its data stays in ``<work_dir>/embedded-broker`` for the next run)."""

    pipeline: str
    result: PipelineRunResult
    attempt: int
    embedded_broker: str | None


def _check_limits(duration: float | None, checkpoints: int | None) -> None:
    if duration is not None and duration <= 0:
        raise UserInputError("--duration must be a positive number of seconds")
    if checkpoints is not None and checkpoints <= 0:
        raise UserInputError("--checkpoints must be a positive whole number")


def run_stages(spec_path: str | os.PathLike[str], *, duration: float | None = None, checkpoints: int | None = None,
               until_exhausted: bool = False, progress: Callable[[PipelineProgress], None] | None = None,
               progress_every: float = 1.0, processes: bool = False) -> StagedRunOutcome:
    """Run a multi-stage pipeline until ``checkpoints`` global checkpoints completed,
    ``duration`` seconds passed or (``until_exhausted``) a global checkpoint covers every
    record of the bounded source stages; a start after the first restores the latest global
    checkpoint (see :meth:`barrierflow.runtime.pipeline.StagedPipelineJob.run`), also on the
    embedded broker, whose data dir under the work dir keeps the channels' records across runs
    (a killed run restarts with the same command); a start after a run that completed no
    global checkpoint starts every stage from the beginning as a new attempt.
    Without any of the three limits it runs until interrupted. ``processes``: every stage in a
    process (and Spark application) of its own, the pipeline coordinator in this one
    (:mod:`barrierflow.runtime.stage_processes`).

    Raises:
        SpecError: the spec does not load.
        UserInputError: a limit is not positive, the spec is single-stage, a stage cannot be
            run yet, or ``until_exhausted`` without bounded sources.
        EmbeddedBrokerError: the embedded broker did not start (or another process runs it
            on this pipeline's data dir).
        JobFailedError: a stage's query (or process) died.
    """
    _check_limits(duration, checkpoints)
    spec = load_any_spec(spec_path)
    if not isinstance(spec, StagedPipelineSpec):
        raise UserInputError(f"{spec_path} is a single-stage spec; run it with ops.run.run")
    with ExitStack() as stack:
        address = None
        if any(c.is_embedded for c in spec.channels):
            address = stack.enter_context(embedded_broker(data_dir_for(pipeline_work_dir(spec))))
        servers = {c.name: address for c in spec.channels if c.is_embedded and address is not None}
        job = StagedPipelineJob(spec, spec_path=str(spec_path), channel_servers=servers)
        if until_exhausted:
            job.check_bounded()
        # The pipeline's lease: no restore of it (or second run) while it runs; its fencing number
        # guards every commit of this run (a stalled driver that wakes up after a restore commits nothing).
        job.hold(stack.enter_context(JobLease(Path(job.work_dir), spec.name, "run", store=job.objects)))
        if processes:
            from barrierflow.runtime.stage_processes import StageProcessSupervisor

            result = StageProcessSupervisor(job, servers=servers).run(
                checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted, progress=progress,
                progress_every=progress_every)
        else:
            result = job.run(checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted,
                             progress=progress, progress_every=progress_every)
        return StagedRunOutcome(spec.name, result, job.attempt, address)


def run_stage(spec_path: str | os.PathLike[str], stage: str) -> int:
    """One stage of a multi-stage pipeline in this process, as started by ``run --processes``
    (``barrierflow run SPEC --stage NAME``): runs until its supervisor asks it to stop or dies;
    returns the number of stage checkpoints completed. The supervisor has restored the
    pipeline and holds its lease; embedded channels' addresses come from the environment.

    Raises:
        UserInputError: the spec is single-stage or has no such stage.
        JobFailedError: the stage's query died, or its supervisor is gone.
    """
    from barrierflow.runtime.stage_processes import run_stage_process, servers_from_env

    spec = load_any_spec(spec_path)
    if not isinstance(spec, StagedPipelineSpec):
        raise UserInputError(f"{spec_path} is a single-stage spec; --stage is for specs with stages")
    if stage not in {s.name for s in spec.stages}:
        raise UserInputError(f"pipeline {spec.name} has no stage {stage!r}; its stages: "
                             f"{[s.name for s in spec.stages]}")
    job = StagedPipelineJob(spec, spec_path=str(spec_path), channel_servers=servers_from_env())
    return run_stage_process(job, stage)


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
    _check_limits(duration, checkpoints)
    pipeline = open_pipeline(spec_path)
    job = StreamingJob(pipeline.spec, spec_path=pipeline.spec_path)
    result = job.run(duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                     progress=progress, progress_every=progress_every)
    dead_letter_uri = job.layout.dead_letter_uri(pipeline.spec)
    return RunOutcome(pipeline.name, result, count_dead_letters(dead_letter_uri), dead_letter_uri)
