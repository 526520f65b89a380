"""One process per stage: the deployment shape of a multi-stage pipeline.

``barrierflow run SPEC --processes`` runs the pipeline coordinator in a supervisor process
(no Spark in it) and every stage in a process of its own (its own Spark application:
``barrierflow run SPEC --stage NAME``). They share nothing but the checkpoint store, the
channels, and each stage's work dir:

* the supervisor is the one run loop
  (:meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`) with
  :class:`SupervisedCuts` (who cuts) and :class:`StageProcesses` (where the stages run): it
  calls :meth:`~barrierflow.runtime.running.RunningPipeline.restore_at_start` once (restore of the
  latest global checkpoint as a new attempt, topics), then starts the stage processes and
  waits until each reports its query running (``_process_ready.json``); only then does the
  pipeline coordinator start and trigger checkpoints, so no barrier request is written before
  a source stage's coordinator reset its control channel. ``--duration`` counts from before
  the stage processes start (their start-up included), as in one process;
* barrier requests go to the source stages' control channels (files in their work dirs), as
  in one process; every stage writes its manifests to the store, where the pipeline
  coordinator collects them; a final stage commits its 2PC sinks when it finds the global
  manifest in the store (:func:`run_stage`);
* each stage writes its progress (``_process_progress.json``) for the one progress display;
* at the end the supervisor writes ``_process_stop.json`` (the last completed global
  checkpoint) in every stage's work dir and waits for the processes to exit.

Failure: any stage process that exits before it was asked to, or exits non-zero, fails the
run (:class:`~barrierflow.errors.JobFailedError` naming the stage, its exit status and the
last lines of its log, ``<stage work dir>/stage-process.log``; a stage that exits with
status 2, its input refused, e.g. a spec change its saved state cannot honour, fails it with
a :class:`~barrierflow.errors.UserInputError`, exit 2 too); the supervisor then kills the
other stages. A stage refuses such a change before its query starts, and the pipeline
coordinator cuts only once every stage runs its query, so no global checkpoint (and no sink
commit) follows a refusal. A stage whose supervisor died stops by itself (it checks its parent). Either way
the next run restores every stage from the latest global checkpoint, as a new attempt; this
is the ABS recovery rule (one failed task restarts the whole dataflow from the last
snapshot), not a weakness of this shape.

The work dirs must be on one host (or a shared file system): the control channel of a
source stage is a directory. That is what ``--processes`` runs; stages on several hosts are
not supported (the barrier request would have to travel through the checkpoint store).
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

from barrierflow.atomic_files import write_atomic
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.pipeline_coordinator import PipelineCoordinator
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointNotFoundError, JobFailedError, UserInputError
from barrierflow.keyed_state.figures import KeyFigures
from barrierflow.runtime.cuts import FollowedCuts, GlobalCheckpoints
from barrierflow.runtime.freshness import Freshness
from barrierflow.runtime.pipeline_runner import PipelineRunner, StageHost, StageResult, StageStats, progress_of
from barrierflow.runtime.progress import Progress, StageProgress
from barrierflow.runtime.running import RunningPipeline
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.workdir.stage_ready import READY_FILE, ready_pid

log = logging.getLogger(__name__)
#: The environment variable that hands a stage process the addresses of embedded channels.
SERVERS_ENV = "BARRIERFLOW_CHANNEL_SERVERS"
#: The environment variable naming the stage processes' parent (the run's coordinating process) pid
#: to a stage process.
STAGE_PARENT_ENV = "BARRIERFLOW_SUPERVISOR_PID"
#: The supervisor's lease fencing number and token (``<fence>:<token>``), handed to its stage
#: processes so that their manifests, write-ahead batches and 2PC decisions check it too.
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
        write_atomic(self.directory / name, json.dumps(body))

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
                                    "epoch": progress.epoch, "records": progress.records,
                                    "batches": progress.batches, "keys_started": progress.keys_started,
                                    "keys_expired": progress.keys_expired, "keys_live": progress.keys_live})

    def progress(self, stage: str) -> StageProgress:
        body = self._read(self.PROGRESS) or {}
        batch = body.get("batch_id")
        started, expired, live = body.get("keys_started"), body.get("keys_expired"), body.get("keys_live")
        return StageProgress(stage, int(str(batch)) if batch is not None else None,
                             float(str(body.get("records_per_second", 0.0))), int(str(body.get("epoch", 0))),
                             records=int(str(body.get("records", 0))), batches=int(str(body.get("batches", 0))),
                             keys_started=int(str(started)) if started is not None else None,
                             keys_expired=int(str(expired)) if expired is not None else None,
                             keys_live=int(str(live)) if live is not None else None)


#: How long the supervisor waits between looks at its stage processes' ready files (seconds).
READY_POLL_SECONDS = 0.1


@dataclass
class _StageProcess:
    job: StageRunner
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


#: How often the supervisor reads a stage process's progress file for the metrics feed (seconds).
FIGURES_SECONDS = 0.5
#: Completed checkpoints whose freshness record the supervisor keeps looking for, per stage.
FRESHNESS_PENDING = 20


class _StoredCheckpoints:
    """A stage's checkpoints as the supervisor sees them (the stage's coordinator runs in the
    stage process): its manifests of the global checkpoints completed in this run, read from
    the store once each; :attr:`completed` holds those not handed out before (and the newest),
    so memory stays bounded over a long run."""

    def __init__(self, runner: StageRunner, keeper: GlobalCheckpoints) -> None:
        self.runner, self.keeper = runner, keeper
        self._read_up_to = 0
        self._latest: list[Manifest] = []

    @property
    def completed(self) -> list[Manifest]:
        ids = [m.checkpoint_id for m in self.keeper.completed if m.checkpoint_id > self._read_up_to]
        if ids:  # (an older one of several completed at once may be gone: the run's retention)
            self._latest = [m for m in (_stored(self.runner.store, cid) for cid in ids) if m is not None]
            self._read_up_to = ids[-1]
        return self._latest

    @property
    def completed_count(self) -> int:
        return len(self.keeper.completed)

    @property
    def failed(self) -> list[object]:
        return list(self.keeper.failed)


class SupervisedCuts(GlobalCheckpoints):
    """Who cuts ``run --processes``: the pipeline coordinator in this process (the supervisor,
    no Spark in it) over stages that run in processes of their own (:class:`StageProcesses`).
    It holds no stage coordinator (each stage process has its own, :class:`~barrierflow.runtime.cuts.FollowedCuts`)
    and starts only once every stage process reports its query running
    (:meth:`queries_started`), so no barrier request is written before a source stage's
    coordinator reset its control channel. Progress comes from each stage's progress file."""

    def __init__(self, pipeline: RunningPipeline) -> None:
        super().__init__(pipeline)
        self.checkpoints: int | None = None

    def start(self, *, checkpoints: int | None) -> None:
        """Nothing yet (the stage processes start next): the limit is kept for :meth:`queries_started`."""
        self.checkpoints = checkpoints

    def queries_started(self) -> None:
        """Every stage process runs its query: the pipeline coordinator starts (at most
        :attr:`checkpoints` triggers)."""
        pipeline = self.pipeline
        self.coordinator = coordinator = PipelineCoordinator(
            pipeline.name, pipeline.spec.checkpoint, pipeline.objects,
            [pipeline.handle(stage) for stage in pipeline.stages], attempt=pipeline.attempt,
            fence=pipeline.fence)  # the global manifests; the stage processes hold none
        coordinator.start()
        coordinator.trigger_limit = self.checkpoints

    def progress(self, stats: dict[str, StageStats], elapsed: float) -> Progress:
        return progress_of(self, tuple(StageProcessFiles(stage.layout.work_dir).progress(stage.name)
                                       for stage in self.pipeline.stages), stats, elapsed)


class StageProcesses(StageHost):
    """Where the stages of ``run --processes`` run: one process each (``barrierflow run SPEC
    --stage NAME``); see the module docstring. ``servers`` are the addresses of channels on the
    embedded broker (handed to the stage processes).

    * :meth:`start`: spawn every stage process, then wait until each reports its query running
      (at most ``start_timeout`` seconds);
    * :meth:`check`: a stage process that exited fails the run;
    * :meth:`stop`: ask every stage process to stop at the last completed global checkpoint and
      wait (at most ``stop_timeout`` seconds) for each to exit 0, unless the run is failing;
      then, in every case, kill what still runs;
    * :meth:`results`: each stage's manifests of the completed global checkpoints, from the store.
    """

    progress_from_start = False

    def __init__(self, keeper: GlobalCheckpoints, *, servers: dict[str, str] | None = None,
                 start_timeout: float = 180.0, stop_timeout: float = 120.0) -> None:
        self.keeper = keeper
        self.job = keeper.pipeline
        self.servers = dict(servers or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.processes: list[_StageProcess] = []
        self._figures: dict[str, tuple[float, StageProgress, _StoredCheckpoints]] = {}
        self._freshness: dict[str, dict[str, list[Freshness]]] = {}
        self._freshness_pending: dict[str, list[int]] = {}
        self._freshness_known: dict[str, int] = {}

    def start(self, started: float) -> None:
        """Raises JobFailedError: a stage process exited, or did not start its query in time."""
        for stage in self.job.stages:
            self.processes.append(self._spawn(stage))
        self._wait_ready()

    def tick(self) -> None:
        """Nothing: each stage process ticks its stage."""

    def figures(self, runner: StageRunner) -> tuple[StageProgress, _StoredCheckpoints] | None:
        """What the metrics feed observes of a stage in a process of its own: the counts its
        progress file holds (written every second by the stage process, read here at most
        every :data:`FIGURES_SECONDS`) and its part of the completed global checkpoints, from
        the store (each stage manifest read once)."""
        now = time.monotonic()
        cached = self._figures.get(runner.name)
        if cached is not None and now - cached[0] < FIGURES_SECONDS:
            return cached[1], cached[2]
        checkpoints = cached[2] if cached is not None else _StoredCheckpoints(runner, self.keeper)
        progress = StageProcessFiles(runner.layout.work_dir).progress(runner.name)
        self._figures[runner.name] = (now, progress, checkpoints)
        return progress, checkpoints

    def key_figures(self, runner: StageRunner) -> KeyFigures | None:
        """What ``runner``'s stage process counted (its progress file, as :meth:`figures` read it)."""
        cached = self._figures.get(runner.name)
        progress = cached[1] if cached is not None else None
        if progress is None or progress.keys_started is None or progress.keys_expired is None:
            return None
        return KeyFigures(progress.keys_started, progress.keys_expired, progress.keys_live)

    def freshness(self, runner: StageRunner) -> dict[str, list[Freshness]]:
        """The freshness figures ``runner``'s stage process stored beside its checkpoints
        (``chk-<n>/_freshness.json``) for the global checkpoints completed in this run, read once
        each; a checkpoint whose record is not there yet (the stage process writes it after its
        commits) is looked for again on later calls, the newest :data:`FRESHNESS_PENDING` of them."""
        figures = self._freshness.setdefault(runner.name, {})
        pending = self._freshness_pending.setdefault(runner.name, [])
        known = self._freshness_known.get(runner.name, 0)
        newer = [m.checkpoint_id for m in self.keeper.completed if m.checkpoint_id > known]
        if newer:
            self._freshness_known[runner.name] = newer[-1]
        waiting = (pending + newer)[-FRESHNESS_PENDING:]
        pending.clear()
        for checkpoint_id in waiting:
            record = runner.store.freshness_record(checkpoint_id)
            if not record:
                pending.append(checkpoint_id)
                continue
            for sink, figure in record.items():
                try:
                    figures.setdefault(sink, []).append(Freshness.from_dict(sink, checkpoint_id, figure))
                except (KeyError, ValueError, TypeError) as exc:
                    log.warning("%s: the freshness record of checkpoint %d, sink %s, is unreadable: %s",
                                runner.name, checkpoint_id, sink, exc)
        return figures

    def check(self) -> None:
        self._check_running()

    def stop(self, *, failing: bool) -> None:
        """Raises JobFailedError (unless ``failing``): a stage process did not stop in time, or
        stopped with a non-zero status (a final stage's last sink commit failed: its log says so)."""
        try:
            if not failing:
                completed = self.keeper.completed
                self._stop_all(completed[-1].checkpoint_id if completed else self.job.last_completed)
        finally:
            self._kill_remaining()

    def results(self, stopped: float) -> dict[str, StageResult]:
        """Each stage's manifests of the global checkpoints completed in the run that the store
        still holds (the run's retention of ``checkpoint.retained`` deleted the older ones)."""
        completed = self.keeper.completed
        return {stage.name: StageResult(completed=[m for m in (_stored(stage.store, c.checkpoint_id) for c in completed)
                                                   if m is not None],
                                        freshness={sink: list(figures)
                                                   for sink, figures in self.freshness(stage).items()},
                                        keys=self.key_figures(stage))
                for stage in self.job.stages}

    # -- the stage processes --------------------------------------------------------------
    def command(self, stage: StageRunner) -> list[str]:
        """What runs ``stage`` in a process of its own: ``barrierflow run SPEC --stage NAME``."""
        return [sys.executable, "-m", "barrierflow.cli.main", "run", self.job.spec_path, "--stage",
                stage.stage.name, "--quiet"]

    def _spawn(self, stage: StageRunner) -> _StageProcess:
        files = StageProcessFiles(stage.layout.work_dir)
        files.clear()
        log_path = stage.layout.work_dir / LOG_FILE
        command = self.command(stage)
        env = {**os.environ, SERVERS_ENV: json.dumps(self.servers), STAGE_PARENT_ENV: str(os.getpid())}
        env.pop(FENCE_ENV, None)
        if self.job.fence is not None:
            env[FENCE_ENV] = f"{self.job.fence.fence}:{self.job.fence.token}"
        with log_path.open("ab") as out:
            process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        log.info("stage %s of pipeline %s: process %d started (log %s)", stage.stage.name, self.job.name,
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
                raise JobFailedError(f"pipeline {self.job.name}: stage(s) {names} did not start their query "
                                     f"within {self.start_timeout:g} s; see {waiting[0].log_path}")
            time.sleep(READY_POLL_SECONDS)

    def _check_running(self) -> None:
        for p in self.processes:
            code = p.process.poll()
            if code == USER_INPUT_EXIT:
                raise UserInputError(
                    f"stage {p.job.stage.name} of pipeline {self.job.name} refused its input and exited "
                    f"({_status(code)}). Last lines of {p.log_path}:\n{p.log_tail()}")
            if code is not None:
                raise JobFailedError(
                    f"stage {p.job.stage.name} of pipeline {self.job.name} exited before the run ended "
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
                raise JobFailedError(f"stage {p.job.stage.name} of pipeline {self.job.name} did not stop "
                                     f"within {self.stop_timeout:g} s; see {p.log_path}") from exc
            if code != 0:
                raise JobFailedError(f"stage {p.job.stage.name} of pipeline {self.job.name} stopped with "
                                     f"{_status(code)}. Last lines of {p.log_path}:\n{p.log_tail()}")

    def _kill_remaining(self) -> None:
        for p in self.processes:
            if p.process.poll() is None:
                log.warning("stage %s: killing its process %d", p.job.stage.name, p.process.pid)
                p.process.kill()
                with suppress(subprocess.TimeoutExpired):
                    p.process.wait(timeout=30)


def _stored(store: CheckpointStore, checkpoint_id: int) -> Manifest | None:
    """The manifest of ``checkpoint_id`` in a stage's ``store`` (None: the run's retention deleted it)."""
    try:
        return store.get(checkpoint_id)
    except CheckpointNotFoundError:
        return None


#: The exit status of a stage process whose input was refused (the CLI's for a UserInputError:
#: a stage that cannot honour its saved state, a bad spec).
USER_INPUT_EXIT = 2


def _status(code: int) -> str:
    if code < 0:
        with suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def process_driver(pipeline: RunningPipeline, *, servers: dict[str, str] | None = None,
                   start_timeout: float = 180.0, stop_timeout: float = 120.0) -> PipelineRunner:
    """The one run loop (:class:`~barrierflow.runtime.pipeline_runner.PipelineRunner`) over
    ``pipeline``'s stages with every stage in a process of its own: cut by :class:`SupervisedCuts`,
    run by :class:`StageProcesses` (``servers``, ``start_timeout``, ``stop_timeout``: its)."""
    keeper = SupervisedCuts(pipeline)
    return PipelineRunner(keeper, StageProcesses(keeper, servers=servers, start_timeout=start_timeout,
                                                 stop_timeout=stop_timeout))


def run_stage(pipeline: RunningPipeline, name: str, *, stop_requested: Callable[[], int | None],
              started: Callable[[], None] = lambda: None, alive: Callable[[], bool] = lambda: True,
              progress: Callable[[StageProgress], None] | None = None,
              progress_every: float = 1.0) -> list[Manifest]:
    """Run stage ``name`` of ``pipeline`` in this process (one Spark application per stage): its
    query and its checkpoint coordinator, while the pipeline coordinator runs elsewhere (the
    supervisor, which restored the pipeline already).

    A final stage follows the global checkpoints in the store itself: it commits its 2PC
    sinks up to ``n`` once ``global/chk-<n>/_metadata.json`` exists and aborts ``n`` once
    ``_failed.json`` does, in checkpoint order. ``started`` is called once the query runs;
    the stage stops when ``stop_requested`` returns the last completed global checkpoint
    (a final stage first commits up to it, waited for as the stage stops), or fails when
    ``alive`` turns False (its supervisor is gone). ``progress`` is given the stage's part of
    the progress every ``progress_every`` seconds. Returns the stage manifests completed in
    this run.

    Raises:
        JobFailedError: the query died, or the supervisor is gone.
        SinkCommitFailedError: a sink commit (or abort) failed, also the last one.
    """
    keeper = FollowedCuts(pipeline, name, stop_requested=stop_requested, started=started, alive=alive)
    result = PipelineRunner(keeper).run(progress=(lambda p: progress(p.stages[0])) if progress is not None else None,
                                        progress_every=progress_every, until=lambda: keeper.stop is not None)
    return result.stages[name].completed


def run_stage_process(pipeline: RunningPipeline, stage: str) -> int:
    """The body of ``barrierflow run SPEC --stage NAME`` (started by the supervisor): run the
    stage until the supervisor asks it to stop; returns the number of stage checkpoints
    completed. The supervisor's pid comes from :data:`STAGE_PARENT_ENV`; when this process's
    parent changes (the supervisor died), the stage fails (JobFailedError)."""
    files = StageProcessFiles(pipeline.stage(stage).layout.work_dir)
    supervisor = int(os.environ.get(STAGE_PARENT_ENV, "0")) or os.getppid()
    handed = os.environ.get(FENCE_ENV, "")
    if handed:  # the supervisor's lease: this stage's commits check its fencing number
        from barrierflow.lease import FenceToken

        fence, _, token = handed.partition(":")
        pipeline.hold(None, token=FenceToken(pipeline.objects, pipeline.name, int(fence), token, "run"))
    completed = run_stage(pipeline, stage, stop_requested=files.stop_requested,
                          started=lambda: files.mark_ready(os.getpid()),
                          alive=lambda: os.getppid() == supervisor, progress=files.write_progress)
    return len(completed)


def servers_from_env() -> dict[str, str]:
    """Embedded channels' addresses handed over by the supervisor (:data:`SERVERS_ENV`)."""
    return dict(json.loads(os.environ.get(SERVERS_ENV) or "{}"))
