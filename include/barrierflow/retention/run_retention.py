"""``checkpoint.retained`` applied by the running pipeline, as Flink's retained checkpoints are.

``barrierflow run`` holds a :class:`RunRetention` (:func:`barrierflow.ops.run.run` gives it to
the run loop, :meth:`~barrierflow.runtime.pipeline_runner.PipelineRunner.run`). Every tick the
loop tells it how many cuts completed in the run and which are in flight
(:meth:`RunRetention.completed`: two integers and the cut coordinator's pending ids, nothing
read); when a cut completed since the last retention run was asked for and none is under way,
one retention run starts on its own thread. It is the one retention code path of ``barrierflow
retain`` and the retain DAG (:func:`~barrierflow.retention.global_plan.retain_cuts`): one stage
keeps its newest ``checkpoint.retained`` checkpoints, several stages keep whole global
checkpoints; every savepoint is kept; shared files go once no kept manifest and no upload in
flight references them (reference counting, and the reservations of
:mod:`barrierflow.checkpointing.reservations`); the job's work dir is cleaned as ``retain``
cleans it. So the store holds about ``retained`` cuts plus the savepoints while the pipeline
runs, instead of growing until the retain DAG's next run.

Off the hot path: nothing of it runs in a checkpoint's synchronous phase or in the run loop's
tick, which only compares counters; nor does one start while the store holds at most
``retained`` completed cuts (counted once at the start of the run, plus the run's own). The
thread runs at the asynchronous phase's CPU priority (``checkpoint.async_nice``: an upload waits
while a retention run deletes, so it must not run below the uploads), one run at a time: cuts
that complete during a run are retained by the next.

What it never deletes:

* a cut in flight: one stage has nothing under ``chk-<n>/`` before its manifest and its shared
  files are reserved; several stages: every global checkpoint from the lowest one pending when
  the run was asked for, and every one above the newest completed, keeps its global records and
  every stage's part (``in_flight_from``);
* what an in-doubt transaction needs: retention never deletes an unfinished (pre-committed)
  transaction of the ledger, its write-ahead batches are not in the checkpoint store, and the
  newest completed cut, the one ``reconcile`` and the next run decide it against, is always kept
  (by both policies);
* what a restore needs: the run's own restore at start ended before its first cut completed,
  and while the run holds the pipeline's lease no other restore of it can start.

A run killed while it deleted leaves its announcement (``_retention/running.json``), which makes
every upload wait until it is :data:`~barrierflow.checkpointing.reservations.STALE_RUN_SECONDS`
old; since a run retains after every checkpoint, a killed driver often leaves one. So each run
announces its retention runs as ``run-<host>-<pid>-<random>``, and :meth:`RunRetention.start`,
before the next run's stages start, ends an announced run of this host whose process is gone (it
will delete nothing more; its deletions are idempotent and the next run finishes them), as every
uploader that meets one does (:meth:`~barrierflow.checkpointing.reservations.RetentionRunWatch.
wait_out_retention`: a restore that does not pass through here, or ``verify``). A run of
another host, or of a process that still runs (a stalled driver may wake up and delete on), is
waited out as before.

A retention run that fails (the store unreachable, a file of the work dir that cannot be
deleted) is logged as a warning and the pipeline runs on: the next completed cut tries again,
and the retain DAG cleans the whole store on its schedule. :meth:`RunRetention.finish`, at the
end of the run, waits for the run under way and, when the pipeline stopped normally, retains the
cuts that completed since, so a stopped pipeline leaves ``retained`` cuts plus its savepoints.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts
from barrierflow.checkpointing.reservations import announced_run, end_run, owner_gone, run_owner_id
from barrierflow.checkpointing.thread_priority import background_executor
from barrierflow.pipeline.model import Stage
from barrierflow.retention.global_plan import CutRetentionPlan, retain_cuts

log = logging.getLogger(__name__)

__all__ = ["RunRetention"]


class RunRetention:
    """Applies ``retained`` to the cuts of the pipeline whose ``cuts`` and ``stages`` are given
    (an :class:`~barrierflow.pipeline.model.OpenedPipeline`'s) while it runs (module docstring);
    ``nice``: the CPU priority of its thread below the caller's (``checkpoint.async_nice``)."""

    def __init__(self, cuts: GlobalCheckpointStore | SingleStageCuts, stages: Sequence[Stage], *, retained: int,
                 nice: int = 0) -> None:
        self.cuts, self.stages, self.retained, self.nice = cuts, tuple(stages), retained, nice
        self._executor: ThreadPoolExecutor | None = None
        self._running: Future[CutRetentionPlan | None] | None = None
        self._asked_at = 0  # completed cuts counted when the last run was asked for
        self._before = 0  # completed cuts the store held when the run started (start)
        #: The plans of the runs that finished, oldest first (the newest few).
        self.plans: list[CutRetentionPlan] = []
        #: How many runs failed (each logged).
        self.failures = 0

    @property
    def pipeline(self) -> str:
        return self.cuts.pipeline

    def start(self) -> list[str]:
        """Before the run's stages start (under the pipeline's lease): end every retention run
        announced in a stage's store by a process of this host that is gone (module docstring);
        returns their ids. A store that cannot be read is left to the uploads' own wait. Also
        counts the completed cuts the store holds: no retention run starts while the store
        holds at most ``retained`` of them (savepoints included), as none could delete a cut."""
        try:
            self._before = len(self.cuts.completed_ids())
        except Exception as exc:
            log.warning("pipeline %s: could not list its completed checkpoints: %s: %s", self.pipeline,
                        type(exc).__name__, exc)
            self._before = self.retained
        ended = []
        for stage in self.stages:
            try:
                announced = announced_run(stage.store.objects)
                if announced is None or not owner_gone(announced.run_id):
                    continue
                end_run(stage.store.objects, announced)
            except Exception as exc:
                log.warning("pipeline %s: could not read the retention run announced in %s: %s: %s", self.pipeline,
                            stage.store.uri, type(exc).__name__, exc)
                continue
            log.warning("pipeline %s: ended retention run %s (started %s), whose process is gone, in %s",
                        self.pipeline, announced.run_id, announced.started_at.isoformat(timespec="seconds"),
                        stage.store.uri)
            ended.append(announced.run_id)
        return ended

    def completed(self, count: int, pending: Collection[int], newest: int | None) -> None:
        """The run loop's tick: ``count`` cuts completed in the run so far, ``newest`` the id of
        the newest (None: none), ``pending`` the ids in flight. Starts a run when a cut
        completed since the last one was asked for, the store may hold more than ``retained``
        cuts and no run is under way; returns at once."""
        if (count <= self._asked_at or self._before + count <= self.retained
                or (self._running is not None and not self._running.done())):
            return
        self._collect()
        self._asked_at = count
        if self._executor is None:
            self._executor = background_executor(1, f"retain-{self.pipeline}", self.nice)
        self._running = self._executor.submit(self._run, _in_flight_from(pending, newest))

    def finish(self, *, count: int, pending: Collection[int], newest: int | None, final: bool) -> None:
        """The end of the run: wait for the run under way; with ``final`` (the pipeline stopped
        normally) retain once more, here, if a cut completed since the last run was asked for
        (``count``, ``pending``, ``newest``: as for :meth:`completed`). Never raises for a
        failed run (logged)."""
        try:
            if self._running is not None:
                self._running.result()
                self._collect()
            if final and count > self._asked_at and self._before + count > self.retained:
                self._asked_at = count
                self._record(self._run(_in_flight_from(pending, newest)))
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def _collect(self) -> None:
        if self._running is not None and self._running.done():
            self._record(self._running.result())
            self._running = None

    def _record(self, plan: CutRetentionPlan | None) -> None:
        if plan is not None:
            self.plans = [*self.plans[-9:], plan]

    def _run(self, in_flight_from: int | None) -> CutRetentionPlan | None:
        """One retention run (None: it failed, logged)."""
        try:
            plan = retain_cuts(self.cuts, self.stages, retained=self.retained, in_flight_from=in_flight_from,
                               run_id=run_owner_id())
        except Exception as exc:  # a background cleanup: the pipeline runs on, the next cut retries
            self.failures += 1
            log.warning("pipeline %s: retention (checkpoint.retained = %d) failed, the next completed checkpoint "
                        "retries it (or run 'barrierflow retain'): %s: %s", self.pipeline, self.retained,
                        type(exc).__name__, exc)
            return None
        if plan.checkpoints or plan.incomplete:
            log.info("pipeline %s: retention kept %s, savepoints %s; deleted %s (incomplete %s), %d bytes",
                     self.pipeline, plan.kept, plan.savepoints, plan.checkpoints, plan.incomplete, plan.bytes_freed)
        return plan


def _in_flight_from(pending: Collection[int], newest: int | None) -> int:
    """The lowest id that may be in flight: the lowest pending one, else the one after every id
    known (``newest`` completed or pending); any cut triggered later gets a higher id."""
    known = max([*pending, newest if newest is not None else 0])
    return min(pending, default=known + 1)
