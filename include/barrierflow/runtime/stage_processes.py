"""One process per stage: the deployment shape of a multi-stage pipeline.

``barrierflow run SPEC --processes`` runs the pipeline coordinator in a supervisor process
(no Spark in it) and every stage in a process of its own (its own Spark application:
``barrierflow run SPEC --stage NAME``). They share nothing but the checkpoint store, the
channels, and each stage's work dir:

* the supervisor calls :meth:`~barrierflow.runtime.pipeline.StagedPipelineJob.prepare` once
  (restore of the latest global checkpoint as a new attempt, topics), then starts the stage
  processes and waits until each reports its query running (``_process_ready.json``); only
  then does it trigger checkpoints, so no barrier request is written before a source stage's
  coordinator reset its control channel;
* barrier requests go to the source stages' control channels (files in their work dirs), as
  in one process; every stage writes its manifests to the store, where the pipeline
  coordinator collects them; a final stage commits its 2PC sinks when it finds the global
  manifest in the store (:meth:`~barrierflow.runtime.pipeline.StagedPipelineJob.run_stage`);
* each stage writes its progress (``_process_progress.json``) for the one progress display;
* at the end the supervisor writes ``_process_stop.json`` (the last completed global
  checkpoint) in every stage's work dir and waits for the processes to exit.

Failure: any stage process that exits before it was asked to, or exits non-zero, fails the
run (:class:`~barrierflow.errors.JobFailedError` naming the stage, its exit status and the
last lines of its log, ``<stage work dir>/stage-process.log``); the supervisor then kills the
other stages. A stage whose supervisor died stops by itself (it checks its parent). Either way
the next run restores every stage from the latest global checkpoint, as a new attempt; this
is the ABS recovery rule (one failed task restarts the whole dataflow from the last
snapshot), not a weakness of this shape.

The work dirs must be on one host (or a shared file system): the control channel of a
source stage is a directory. That is what ``--processes`` runs; spreading stages over hosts
needs the barrier request moved into the checkpoint store (issue 15).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from barrierflow.checkpointing.pipeline_coordinator import PipelineCoordinator
from barrierflow.errors import JobFailedError, UserInputError
from barrierflow.runtime.pipeline import (
    TICK_SECONDS,
    GlobalCuts,
    PipelineProgress,
    StagedPipelineJob,
    StageJob,
    StageProgress,
)
from barrierflow.runtime.pipeline_runner import PipelineRunner, RunResult, StageResult
from barrierflow.workdir.stage_ready import READY_FILE, ready_pid

log = logging.getLogger(__name__)
#: The environment variable that hands a stage process the addresses of embedded channels.
SERVERS_ENV = "BARRIERFLOW_CHANNEL_SERVERS"
#: The environment variable naming the supervisor's pid to a stage process.
SUPERVISOR_ENV = "BARRIERFLOW_SUPERVISOR_PID"
#: The supervisor's lease fencing number and token (``<fence>:<token>``), handed to its stage
#: processes so that their manifests, staged batches and 2PC decisions check it too.
FENCE_ENV = "BARRIERFLOW_LEASE_FENCE"
LOG_FILE = "stage-process.log"


@dataclass(frozen=True)
class StageProcessFiles:
    """The files a stage process and its supervisor exchange in the stage's work dir. Each is
    written atomically (temp file + rename)."""

    directory: Path

    READY = READY_FILE
    STOP = "_process_stop.json"
    PROGRESS = "_process_progress.json"

    def clear(self) -> None:
        """Remove what an earlier run left (before the stage process starts)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (self.READY, self.STOP, self.PROGRESS):
            with suppress(FileNotFoundError):
                (self.directory / name).unlink()

    def _write(self, name: str, body: dict[str, object]) -> None:
        tmp = self.directory / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.replace(tmp, self.directory / name)

    def _read(self, name: str) -> dict[str, object] | None:
        try:
            return dict(json.loads((self.directory / name).read_text(encoding="utf-8")))
        except (FileNotFoundError, ValueError):
            return None

    def mark_ready(self, pid: int) -> None:
        self._write(self.READY, {"pid": pid})

    def ready_pid(self) -> int | None:
        """The stage process's pid once its query runs (None before)."""
        return ready_pid(self.directory)

    def request_stop(self, last_completed: int) -> None:
        self._write(self.STOP, {"last_completed": last_completed})

    def stop_requested(self) -> int | None:
        """The last completed global checkpoint the supervisor stopped at (None: keep running)."""
        body = self._read(self.STOP)
        return int(str(body["last_completed"])) if body is not None else None

    def write_progress(self, progress: StageProgress) -> None:
        self._write(self.PROGRESS, {"batch_id": progress.batch_id, "records_per_second": progress.records_per_second,
                                    "epoch": progress.epoch})

    def progress(self, stage: str) -> StageProgress:
        body = self._read(self.PROGRESS) or {}
        batch = body.get("batch_id")
        return StageProgress(stage, int(str(batch)) if batch is not None else None,
                             float(str(body.get("records_per_second", 0.0))), int(str(body.get("epoch", 0))))


@dataclass
class _StageProcess:
    job: StageJob
    files: StageProcessFiles
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        wanted = [line for line in text if not line.lstrip().startswith("at ")][-lines:]
        return "\n".join(wanted)


class StageProcessSupervisor:
    """Runs ``job`` with one process per stage; see the module docstring. ``servers`` are the
    addresses of channels on the embedded broker (handed to the stage processes)."""

    def __init__(self, job: StagedPipelineJob, *, servers: dict[str, str] | None = None,
                 start_timeout: float = 180.0, stop_timeout: float = 120.0) -> None:
        self.job = job
        self.servers = dict(servers or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.processes: list[_StageProcess] = []

    def run(self, *, checkpoints: int | None = None, duration: float | None = None, until_exhausted: bool = False,
            progress: Callable[[PipelineProgress], None] | None = None,
            progress_every: float = 1.0) -> RunResult:
        """As :meth:`StagedPipelineJob.run`, with every stage in its own process.

        Raises:
            JobFailedError: a stage process failed to start, exited early or non-zero.
        """
        job = self.job
        job.prepare()
        ends = job.source_ends() if until_exhausted else None
        started = time.monotonic()
        try:
            for stage in job.stages:
                self.processes.append(self._spawn(stage))
            self._wait_ready()
            coordinator = PipelineCoordinator(job.spec.name, job.spec.checkpoint, job.objects,
                                              [job.handle(stage) for stage in job.stages], attempt=job.attempt,
                                              fence=job.fence)  # the global manifests; the stage processes hold none
            job.coordinator = coordinator
            coordinator.start()
            coordinator.trigger_limit = checkpoints
            next_progress = time.monotonic() + progress_every
            while True:
                job.check_lease()
                coordinator.tick()
                self._check_running()
                if progress is not None and time.monotonic() >= next_progress:
                    next_progress = time.monotonic() + progress_every
                    progress(self._progress(coordinator))
                if job.limit_reached(coordinator, checkpoints=checkpoints, ends=ends,
                                     deadline=started + duration if duration is not None else None):
                    break
                time.sleep(TICK_SECONDS)
            if progress is not None:
                progress(self._progress(coordinator))
            self._stop_all(coordinator.completed[-1].checkpoint_id if coordinator.completed
                            else job.last_completed)
        finally:
            self._kill_remaining()
        stages = {stage.name: StageResult(completed=[stage.store.get(m.checkpoint_id) for m in coordinator.completed])
                  for stage in job.stages}
        return RunResult(job.spec.name, time.monotonic() - started, list(coordinator.completed),
                         list(coordinator.failed), stages, tuple(job.graph.source_stages))

    # -- the stage processes --------------------------------------------------------------
    def _spawn(self, stage: StageJob) -> _StageProcess:
        files = StageProcessFiles(stage.layout.work_dir)
        files.clear()
        log_path = stage.layout.work_dir / LOG_FILE
        command = [sys.executable, "-m", "barrierflow.cli.main", "run", self.job.spec_path, "--stage",
                   stage.stage.name, "--quiet"]
        env = {**os.environ, SERVERS_ENV: json.dumps(self.servers), SUPERVISOR_ENV: str(os.getpid())}
        env.pop(FENCE_ENV, None)
        if self.job.fence is not None:
            env[FENCE_ENV] = f"{self.job.fence.fence}:{self.job.fence.token}"
        with log_path.open("ab") as out:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        log.info("stage %s of pipeline %s: process %d started (log %s)", stage.stage.name, self.job.spec.name,
                 process.pid, log_path)
        return _StageProcess(stage, files, process, log_path)

    def _wait_ready(self) -> None:
        """Until every stage process reports its query running; fails on an early exit or
        after ``start_timeout`` seconds."""
        deadline = time.monotonic() + self.start_timeout
        waiting = list(self.processes)
        while waiting:
            self._check_running()
            waiting = [p for p in waiting if p.files.ready_pid() != p.process.pid]
            if waiting and time.monotonic() > deadline:
                names = ", ".join(p.job.stage.name for p in waiting)
                raise JobFailedError(f"pipeline {self.job.spec.name}: stage(s) {names} did not start their query "
                                     f"within {self.start_timeout:g} s; see {waiting[0].log_path}")
            time.sleep(TICK_SECONDS * 5)

    def _check_running(self) -> None:
        for p in self.processes:
            code = p.process.poll()
            if code is not None:
                raise JobFailedError(
                    f"stage {p.job.stage.name} of pipeline {self.job.spec.name} exited before the run ended "
                    f"({_status(code)}); every stage restarts from the latest global checkpoint when the pipeline is "
                    f"run again. Last lines of {p.log_path}:\n{p.log_tail()}")

    def _stop_all(self, last_completed: int) -> None:
        for p in self.processes:
            p.files.request_stop(last_completed)
        deadline = time.monotonic() + self.stop_timeout
        for p in self.processes:
            try:
                code = p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise JobFailedError(f"stage {p.job.stage.name} of pipeline {self.job.spec.name} did not stop "
                                     f"within {self.stop_timeout:g} s; see {p.log_path}") from exc
            if code != 0:
                raise JobFailedError(f"stage {p.job.stage.name} of pipeline {self.job.spec.name} stopped with "
                                     f"{_status(code)}. Last lines of {p.log_path}:\n{p.log_tail()}")

    def _kill_remaining(self) -> None:
        for p in self.processes:
            if p.process.poll() is None:
                log.warning("stage %s: killing its process %d", p.job.stage.name, p.process.pid)
                p.process.kill()
                with suppress(subprocess.TimeoutExpired):
                    p.process.wait(timeout=30)

    def _progress(self, coordinator: PipelineCoordinator) -> PipelineProgress:
        completed = coordinator.completed
        return PipelineProgress(self.job.spec.name,
                                tuple(p.files.progress(p.job.stage.name) for p in self.processes),
                                completed[-1].checkpoint_id if completed else (self.job.last_completed or None),
                                len(coordinator.failed))


def _status(code: int) -> str:
    if code < 0:
        with suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def run_in_processes(driver: PipelineRunner, *, servers: dict[str, str] | None = None, checkpoints: int | None = None,
                     duration: float | None = None, until_exhausted: bool = False,
                     progress: Callable[[PipelineProgress], None] | None = None,
                     progress_every: float = 1.0) -> RunResult:
    """Run ``driver``'s pipeline with every stage in a process of its own
    (:class:`StageProcessSupervisor`), under the lease ``driver`` holds.

    Raises:
        UserInputError: the pipeline is one stage (its checkpoints are its cuts: there is no
            pipeline coordinator to supervise stage processes).
        JobFailedError: a stage process failed to start, exited early or non-zero.
    """
    keeper = driver.keeper
    if not isinstance(keeper, GlobalCuts):
        raise UserInputError(f"{keeper.spec_path} has one stage; --processes and --stage are for specs with stages")
    return StageProcessSupervisor(keeper.job, servers=servers).run(
        checkpoints=checkpoints, duration=duration, until_exhausted=until_exhausted, progress=progress,
        progress_every=progress_every)


def run_stage_process(job: StagedPipelineJob, stage: str) -> int:
    """The body of ``barrierflow run SPEC --stage NAME`` (started by the supervisor): run the
    stage until the supervisor asks it to stop; returns the number of stage checkpoints
    completed. The supervisor's pid comes from :data:`SUPERVISOR_ENV`; when this process's
    parent changes (the supervisor died), the stage fails (JobFailedError)."""
    files = StageProcessFiles(job.stage_job(stage).layout.work_dir)
    supervisor = int(os.environ.get(SUPERVISOR_ENV, "0")) or os.getppid()
    handed = os.environ.get(FENCE_ENV, "")
    if handed:  # the supervisor's lease: this stage's commits check its fencing number
        from barrierflow.lease import FenceToken

        fence, _, token = handed.partition(":")
        job.hold(None, token=FenceToken(job.objects, job.spec.name, int(fence), token, "run"))
    completed = job.run_stage(stage, stop_requested=files.stop_requested,
                              started=lambda: files.mark_ready(os.getpid()),
                              alive=lambda: os.getppid() == supervisor, progress=files.write_progress)
    return len(completed)


def servers_from_env() -> dict[str, str]:
    """Embedded channels' addresses handed over by the supervisor (:data:`SERVERS_ENV`)."""
    return dict(json.loads(os.environ.get(SERVERS_ENV) or "{}"))
