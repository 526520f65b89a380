"""Run a pipeline (``barrierflow run``, the launch DAG's spark-submit job), whatever its shape.

:func:`run` opens the pipeline once and runs it: a single-stage pipeline as one streaming job
(:class:`barrierflow.runtime.job.StreamingJob`), a pipeline of several stages as every stage's
query and the pipeline coordinator in one process
(:class:`barrierflow.runtime.pipeline.StagedPipelineJob`; ``processes``: a process per stage).
The two runtimes are separate; :func:`run` is the one place that picks one.
A multi-stage run starts the embedded broker (:mod:`barrierflow.kafka_io.embedded_broker`)
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
from barrierflow.kafka_io.embedded_broker import data_dir_for, embedded_broker
from barrierflow.lease import JobLease
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.runtime.job import Progress, RunResult, StreamingJob
from barrierflow.runtime.pipeline import (
    PipelineProgress,
    PipelineRunResult,
    StagedPipelineJob,
    StageProgress,
)
from barrierflow.sources.dead_letter import count_dead_letters
from barrierflow.spec.models import PipelineSpec
from barrierflow.spec.stages import StagedPipelineSpec

__all__ = ["AnyProgress", "PipelineProgress", "PipelineRunResult", "Progress", "RunOutcome", "RunResult",
           "StageProgress", "run", "run_stage"]

#: What the live progress display is given every ``progress_every`` seconds: one stage's
#: :class:`Progress`, or every stage's :class:`PipelineProgress`.
AnyProgress = Progress | PipelineProgress


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run did.

    Attributes:
        stages: the stages run (one: the pipeline's).
        result: one stage: the job's :class:`RunResult` (batches, records, checkpoints);
            several: the :class:`PipelineRunResult` (global checkpoints, each stage's manifests).
        attempt: the attempt the run wrote (several stages: a start after the first restores
            the latest global checkpoint as a new attempt).
        dead_letters, dead_letter_uri: one stage: the dead letters it left and where.
        embedded_broker: several stages: the address of the broker started for ``bootstrap:
            embedded`` channels (None if none was), stopped once the run ended (its data stays
            in ``<work_dir>/embedded-broker`` for the next run).
    """

    pipeline: str
    stages: tuple[str, ...]
    result: RunResult | PipelineRunResult
    attempt: int = 0
    dead_letters: int = 0
    dead_letter_uri: str = ""
    embedded_broker: str | None = None


def _check_limits(duration: float | None, checkpoints: int | None) -> None:
    if duration is not None and duration <= 0:
        raise UserInputError("--duration must be a positive number of seconds")
    if checkpoints is not None and checkpoints <= 0:
        raise UserInputError("--checkpoints must be a positive whole number")


def _run_stages(pipeline: OpenedPipeline, *, duration: float | None, checkpoints: int | None,
                until_exhausted: bool, progress: Callable[[PipelineProgress], None] | None, progress_every: float,
                processes: bool) -> RunOutcome:
    spec = pipeline.spec
    assert isinstance(spec, StagedPipelineSpec)  # several stages
    with ExitStack() as stack:
        address = None
        if any(c.is_embedded for c in spec.channels):
            address = stack.enter_context(embedded_broker(data_dir_for(pipeline.work_dir)))
        servers = {c.name: address for c in spec.channels if c.is_embedded and address is not None}
        job = StagedPipelineJob(spec, spec_path=pipeline.spec_path, channel_servers=servers)
        if until_exhausted:
            job.check_bounded()
        # The pipeline's lease: no restore of it (or second run) while it runs; its fencing number
        # guards every commit of this run (a stalled driver that wakes up after a restore commits nothing).
        job.hold(stack.enter_context(JobLease(Path(job.work_dir), spec.name, "run", store=job.objects)))
        result: PipelineRunResult
        if processes:
            from barrierflow.runtime.stage_processes import StageProcessSupervisor

            result = StageProcessSupervisor(job, servers=servers).run(
                checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted, progress=progress,
                progress_every=progress_every)
        else:
            result = job.run(checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted,
                             progress=progress, progress_every=progress_every)
        return RunOutcome(spec.name, tuple(s.name for s in pipeline.stages), result, job.attempt,
                          embedded_broker=address)


def _run_one(pipeline: OpenedPipeline, *, duration: float | None, checkpoints: int | None, until_exhausted: bool,
             progress: Callable[[Progress], None] | None, progress_every: float) -> RunOutcome:
    spec = pipeline.spec
    assert isinstance(spec, PipelineSpec)  # one stage
    job = StreamingJob(spec, spec_path=pipeline.spec_path)
    result = job.run(duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                     progress=progress, progress_every=progress_every)
    dead_letter_uri = job.layout.dead_letter_uri(spec)
    return RunOutcome(spec.name, (spec.name,), result, job.store.attempt(), count_dead_letters(dead_letter_uri),
                      dead_letter_uri)


def run(spec_path: str | os.PathLike[str], *, duration: float | None = None, checkpoints: int | None = None,
        until_exhausted: bool = False, progress: Callable[[AnyProgress], None] | None = None,
        progress_every: float = 1.0, processes: bool = False) -> RunOutcome:
    """Run the pipeline until ``duration`` seconds passed, ``checkpoints`` cuts completed or
    (with ``until_exhausted``) a completed cut covers every record of its bounded sources;
    without any of the three limits until interrupted. ``progress`` is called every
    ``progress_every`` seconds (:data:`AnyProgress`).

    One stage: see :meth:`barrierflow.runtime.job.StreamingJob.run` for the contract. Several
    stages: a start after the first restores the latest global checkpoint (see
    :meth:`barrierflow.runtime.pipeline.StagedPipelineJob.run`), also on the embedded broker,
    whose data dir under the work dir keeps the channels' records across runs (a killed run
    restarts with the same command); a start after a run that completed no global checkpoint
    starts every stage from the beginning as a new attempt. ``processes``: every stage in a
    process (and Spark application) of its own, the pipeline coordinator in this one
    (:mod:`barrierflow.runtime.stage_processes`).

    Raises:
        SpecError: the spec does not load.
        UserInputError: a limit is not positive; the job runs already; ``processes`` for one
            stage; several stages: a stage cannot be run yet, or ``until_exhausted`` without
            bounded sources.
        EmbeddedBrokerError: the embedded broker did not start (or another process runs it
            on this pipeline's data dir).
        TolerableFailuresExceededError, JobFailedError: the job (a stage's query or process)
            stopped on a failure.
        SinkCommitFailedError: a sink could not commit (or abort) an epoch, in either shape
            also the run's last one (waited for once the queries stopped); it names the sink,
            the epoch and the fix (``barrierflow reconcile``, or the next run). With
            ``processes`` the final stage's process exits 1 on it: JobFailedError quoting it.
    """
    _check_limits(duration, checkpoints)
    pipeline = open_pipeline(spec_path)
    if pipeline.single_stage:
        if processes:
            raise UserInputError(f"{spec_path} has one stage; --processes and --stage are for specs with stages")
        return _run_one(pipeline, duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                        progress=progress, progress_every=progress_every)
    return _run_stages(pipeline, duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                       progress=progress, progress_every=progress_every, processes=processes)


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

    pipeline = open_pipeline(spec_path)
    if pipeline.single_stage:
        raise UserInputError(f"{spec_path} has one stage; --processes and --stage are for specs with stages")
    pipeline.stage(stage)  # UserInputError naming the stages
    assert isinstance(pipeline.spec, StagedPipelineSpec)
    job = StagedPipelineJob(pipeline.spec, spec_path=pipeline.spec_path, channel_servers=servers_from_env())
    return run_stage_process(job, stage)
