"""Run a pipeline (``barrierflow run``, the launch DAG's spark-submit job), whatever its shape.

:func:`run` opens the pipeline once and runs it through the one run driver
(:func:`barrierflow.runtime.run_driver.open_driver`: every stage's query and coordinator and the
pipeline's cut keeper in one loop; one stage is the case N = 1, cut by its own checkpoints), or
with ``processes`` a process per stage (:mod:`barrierflow.runtime.stage_processes`), under the
pipeline's lease. A run starts the embedded broker (:mod:`barrierflow.kafka_io.embedded_broker`)
for its duration when a channel's ``bootstrap`` is ``embedded``, with its data under the
pipeline's work dir (``<work_dir>/embedded-broker``), so the channels outlive the run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from barrierflow.errors import BarrierflowError, SparkDriverDiedError, UserInputError
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.retention.run_retention import RunRetention
from barrierflow.runtime.freshness import Freshness, percentile
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult
from barrierflow.runtime.progress import Progress, StageProgress
from barrierflow.runtime.run_driver import channel_servers, open_driver, open_stage_process_driver
from barrierflow.runtime.startup import PhaseReport, StartupPhase
from barrierflow.runtime.stop_finish import finish_stop, record_outcome
from barrierflow.runtime.stop_request import StopOutcome
from barrierflow.sources.dead_letter import count_dead_letters
from barrierflow.upgrade.record import refuse_unfinished

log = logging.getLogger(__name__)

__all__ = ["DeadLetters", "Progress", "RunOutcome", "RunResult", "StageProgress", "StartupPhase",
           "dead_letters", "freshness_lines", "run", "run_stage", "submit_jars"]


def freshness_lines(freshness: Mapping[tuple[str, str], Sequence[Freshness]], *, stages: int) -> list[str]:
    """The run summary's freshness lines: per (stage, sink) with a checkpoint of records committed
    in the run, the p50 and p99 (nearest rank) of its checkpoints' freshness
    (:mod:`barrierflow.runtime.freshness`); the stage is named when the pipeline has several."""
    lines = []
    for (stage, sink), figures in freshness.items():
        seconds = [f.seconds for f in figures]
        where = f"stage {stage}, sink {sink}" if stages > 1 else f"sink {sink}"
        lines.append(f"freshness ({where}: commit minus oldest arrival, per checkpoint): p50 "
                     f"{percentile(seconds, 0.5):.2f} s, p99 {percentile(seconds, 0.99):.2f} s over {len(seconds)} "
                     f"checkpoint{'s' if len(seconds) != 1 else ''}")
    return lines

@dataclass(frozen=True)
class DeadLetters:
    """The malformed records a stage's dead-letter output holds (every run's so far), and where."""

    count: int
    uri: str


def dead_letters(pipeline: OpenedPipeline) -> dict[str, DeadLetters]:
    """Each stage's dead letters (one stage: the pipeline's), read from the dead-letter output
    its executors write (``dead_letter_path``, else ``<stage work dir>/dead-letter``)."""
    found = {}
    for stage in pipeline.stages:
        uri = stage.layout.dead_letter_uri(stage.spec)
        found[stage.name] = DeadLetters(count_dead_letters(uri), uri)
    return found


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run did.

    Attributes:
        stages: the stages run (one: the pipeline's).
        result: the :class:`RunResult`: the cuts completed and failed (one stage: its
            checkpoints; several: global checkpoints), each stage's batches, records and
            manifests.
        attempt: the attempt the run wrote (several stages: a start after the first restores
            the latest global checkpoint as a new attempt).
        dead_letters, dead_letter_uri: the dead letters the stages left (all of them) and
            where (each stage's URI, comma-separated).
        stage_dead_letters: each stage's own (:func:`dead_letters`), which those two sum up.
        noun: what the run's cuts are called (``checkpoint``, ``global checkpoint``).
        stop: the outcome of the stop request that ended the run (``barrierflow stop``;
            None: it ended otherwise): with a savepoint, its id and location.
        embedded_broker: several stages: the address of the broker started for ``bootstrap:
            embedded`` channels (None if none was), stopped once the run ended (its data stays
            in ``<work_dir>/embedded-broker`` for the next run).
    """

    pipeline: str
    stages: tuple[str, ...]
    result: RunResult
    attempt: int = 0
    dead_letters: int = 0
    dead_letter_uri: str = ""
    embedded_broker: str | None = None
    stage_dead_letters: dict[str, DeadLetters] = field(default_factory=dict)
    noun: str = "checkpoint"
    stop: StopOutcome | None = None


def submit_jars(spec_path: str | os.PathLike[str]) -> list[str]:
    """The installed jars (paths) that a driver of ``spec_path`` needs on its class path from the
    start: those of the JVM artifact sets of its sources, in every stage (Spark's Kafka connector
    for ``reader: spark``), and Hadoop's S3A file system for a ``work_dir`` on object storage;
    empty for none. A driver that ``spark-submit`` starts gets them as
    ``--jars`` (its class path is fixed before the job's session could add them).

    Raises:
        SpecError: the spec does not load.
        JvmArtifactError: a needed jar is not installed (naming ``make install``).
        S3AUnavailableError: the work dir is on object storage and the S3A jars are not installed.
    """
    from barrierflow.pipeline.spec_summary import summarize
    from barrierflow.runtime.session import source_jars, work_dir_jars
    from barrierflow.spec.loader import load_any_spec

    spec = load_any_spec(spec_path)
    return source_jars(summarize(spec).sources) + work_dir_jars([spec.work_dir or ""])


def _refuse_object_work_dir_without_s3a(pipeline: OpenedPipeline) -> None:
    """Before anything reads or writes a work dir on object storage: its S3A jars are installed.

    Raises:
        S3AUnavailableError: they are not (naming the set and ``make install``).
    """
    from barrierflow.runtime.session import work_dir_jars

    work_dirs = [stage.spec.work_dir or "" for stage in pipeline.stages]
    work_dir_jars(work_dirs)


def _check_limits(duration: float | None, checkpoints: int | None) -> None:
    if duration is not None and duration <= 0:
        raise UserInputError("--duration must be a positive number of seconds")
    if checkpoints is not None and checkpoints <= 0:
        raise UserInputError("--checkpoints must be a positive whole number")


def run(spec_path: str | os.PathLike[str], *, duration: float | None = None, checkpoints: int | None = None,
        until_exhausted: bool = False, progress: Callable[[Progress], None] | None = None,
        progress_every: float = 1.0, processes: bool = False, phases: PhaseReport | None = None) -> RunOutcome:
    """Run the pipeline until ``duration`` seconds passed, ``checkpoints`` cuts completed or
    (with ``until_exhausted``) a completed cut covers every record of its bounded sources;
    without any of the three limits until interrupted. ``progress`` is called every
    ``progress_every`` seconds with the one :class:`Progress` (each stage's part in ``stages``);
    ``phases`` with each step of the start up to the first micro-batch
    (:mod:`barrierflow.runtime.startup`: the restore's choosing and verifying, restoring N
    files, replaying).

    The run loop and its contract: :meth:`barrierflow.runtime.pipeline_runner.PipelineRunner.run`.
    One stage restores its newest valid checkpoint when it has no local Spark checkpoint.
    Several stages: a start after the first restores the latest global checkpoint (see
    :meth:`barrierflow.runtime.running.RunningPipeline.restore_at_start`), also on the embedded broker,
    whose data dir under the work dir keeps the channels' records across runs (a killed run
    restarts with the same command); a start after a run that completed no global checkpoint
    starts every stage from the beginning as a new attempt. ``processes``: every stage in a
    process (and Spark application) of its own, the pipeline coordinator in this one
    (:mod:`barrierflow.runtime.stage_processes`). The spec's ``metrics:`` block serves the run's
    Prometheus metrics (:mod:`barrierflow.metrics`) from this process, in every shape: with
    ``processes`` from each stage process's progress file and its manifests in the store. The
    run applies ``checkpoint.retained`` as its cuts complete, from this process in every shape
    (:mod:`barrierflow.retention.run_retention`), off the checkpoints' path.

    A stop request (``barrierflow stop``, :mod:`barrierflow.ops.stop`) ends the run too: once the
    run loop is done with it and every stage stopped, the savepoint's cut (if one was asked)
    becomes a savepoint in every stage, under the lease, and the outcome is recorded for
    ``stop``, which returns once the lease is released (:attr:`RunOutcome.stop`). A run that fails while stopping
    records the failure (naming the sink and epoch of a failed commit) before it raises.

    Raises:
        SpecError: the spec does not load.
        S3AUnavailableError: the work dir is on object storage and the ``spark-s3a`` jars are not
            installed (before anything touches it).
        UserInputError: a limit is not positive; the job runs already; an upgrade of the
            pipeline is unfinished (UpgradeInProgressError: rerun its command); ``processes`` for one
            stage; ``until_exhausted`` without bounded sources; several stages: a stage cannot
            be run yet.
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
    _refuse_object_work_dir_without_s3a(pipeline)
    refuse_unfinished(pipeline.objects, pipeline.name)
    if processes:
        pipeline.refuse_stage_processes("--processes")
    drivers: list[PipelineRunner] = []
    try:
        outcome = _run(pipeline, duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                       progress=progress, progress_every=progress_every, processes=processes, opened=drivers.append,
                       phases=phases)
    except Exception as exc:
        died = _jvm_died(pipeline, str(spec_path), exc)
        error = died or exc
        if not isinstance(error, BarrierflowError):
            raise
        stopping = drivers[0].stopping if drivers else None
        if stopping is not None:
            record_outcome(pipeline, StopOutcome(
                stopping.request.id, stopping.request.fence, "failed", stopping.savepoint,
                noun=words(pipeline).cut_noun,
                message=f"the run failed while stopping: {error}"))
        if died is not None:
            raise died from exc
        raise
    return outcome


def _jvm_died(pipeline: OpenedPipeline, spec_path: str, exc: Exception) -> SparkDriverDiedError | None:
    """The run's failure ``exc`` as what it is when the driver's Spark JVM has died (whatever
    Py4J or the run loop raised about it): one sentence naming the JVM and the checkpoint the
    next run resumes from; None while the JVM lives (``exc`` is the error then)."""
    from barrierflow.spark.session import driver_jvm_death

    try:
        what = driver_jvm_death()
    except ImportError:  # no PySpark in this process: no JVM of ours
        return None
    if what is None:
        return None
    try:
        newest = pipeline.newest_cut()
    except Exception as store_exc:  # the store is what it is; the JVM is the news
        log.info("reading the newest %s after the JVM died failed: %s", words(pipeline).cut_noun, store_exc)
        return SparkDriverDiedError(f"{what} died while pipeline {pipeline.name} ran; 'barrierflow run {spec_path}' "
                                    f"resumes from the newest completed {words(pipeline).cut_noun} in "
                                    f"{pipeline.storage}")
    if newest is None:
        resume = (f"no {words(pipeline).cut_noun} had completed, so 'barrierflow run {spec_path}' starts again "
                  "from the beginning of its sources (nothing was committed)")
    else:
        resume = (f"'barrierflow run {spec_path}' resumes exactly once from {words(pipeline).cut_noun} "
                  f"{newest.checkpoint_id}, the newest completed one in {pipeline.storage}")
    return SparkDriverDiedError(f"{what} died while pipeline {pipeline.name} ran; {resume}")


def _run(pipeline: OpenedPipeline, *, duration: float | None, checkpoints: int | None, until_exhausted: bool,
         progress: Callable[[Progress], None] | None, progress_every: float, processes: bool,
         opened: Callable[[PipelineRunner], None], phases: PhaseReport | None = None) -> RunOutcome:
    """:func:`run` under the lease (``opened`` is told the driver once it exists)."""
    with ExitStack() as stack:
        address, servers = stack.enter_context(channel_servers(pipeline))
        driver = open_driver(pipeline, channel_servers=servers, processes=processes)
        opened(driver)
        if until_exhausted:
            driver.check_bounded()
        # The pipeline's lease: no restore of it (or second run) while it runs; its fencing number
        # guards every commit of this run (a stalled driver that wakes up after a restore commits nothing).
        driver.hold(stack.enter_context(driver.lease()))
        retention = RunRetention(pipeline.cuts, pipeline.stages, retained=pipeline.spec.checkpoint.retained,
                                 nice=pipeline.spec.checkpoint.async_nice)
        result = driver.run(duration=duration, checkpoints=checkpoints, until_exhausted=until_exhausted,
                            progress=progress, progress_every=progress_every, metrics=pipeline.spec.metrics,
                             phases=phases, retention=retention)
        stopped = finish_stop(pipeline, result.stopped_by, result.savepoint) if result.stopped_by else None
        if stopped is not None:
            record_outcome(pipeline, stopped)  # 'stop' returns once the lease is released, just below
        found = dead_letters(pipeline)
        return RunOutcome(pipeline.name, tuple(s.name for s in pipeline.stages), result, driver.attempt,
                          sum(d.count for d in found.values()), ", ".join(d.uri for d in found.values()),
                          embedded_broker=address, stage_dead_letters=found, noun=words(pipeline).cut_noun,
                          stop=stopped)


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

    job = open_stage_process_driver(open_pipeline(spec_path), stage, channel_servers=servers_from_env())
    return run_stage_process(job, stage)
