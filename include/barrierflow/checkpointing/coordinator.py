"""The checkpoint coordinator: triggers barriers, drives each checkpoint through its
lifecycle (:mod:`barrierflow.checkpointing.lifecycle`), completes it and tells the sinks.

It runs in the driver's Python process and is driven by :meth:`CheckpointCoordinator.tick`,
called every few milliseconds by the job loop. One tick does, in order:

Step 1. Collect finished asynchronous phases: write the manifest (the checkpoint is then
        complete), tell every sink (commit), clean the snapshot directory. A failed upload or
        sink pre-commit fails the checkpoint; it is never listed as completed.
Step 2. Scan Spark's ``commits/`` for newly committed batches; a batch whose offsets carry a
        newer barrier than the previous one is barrier batch V of checkpoint n: run the
        synchronous phase (hard links, ms) and start the asynchronous phase on a background
        thread: upload the new files, then pre-commit every sink (2PC) on the sinks' ordered
        thread. In the synchronous-upload baseline the planner is held until it finished.
Step 3. Expire checkpoints older than ``checkpoint.timeout`` (EXPIRED).
Step 4. Trigger the next checkpoint when the interval elapsed, the min pause since the last
        completion passed, no barrier is still on its way, and fewer than max_concurrent
        checkpoints are pending: write the barrier request for the sources' planner.
Step 5. If more than ``tolerable_failed_checkpoints`` consecutive checkpoints failed, raise
        :class:`TolerableFailuresExceededError` (the job loop stops the query).

Its helpers each own one concern: :class:`~barrierflow.checkpointing.stage.StageTracker`
finds barrier batches in Spark's logs and takes the synchronous snapshot;
:class:`~barrierflow.checkpointing.uploader.SnapshotUploader` stores the files;
:class:`~barrierflow.checkpointing.sink_notifier.SinkNotifier` runs every sink call
(pre-commit, commit, abort) in order from one ordered thread, so a commit of epoch n never
races the pre-commit of epoch n+1 or the abort of a failed one (the several sinks of one
commit run side by side). The clock is injected (``monotonic``
and ``now``) so the timing rules are unit-testable.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.errors import SinkCommitFailedError, SinkPreCommitError
from barrierflow.checkpointing.lifecycle import ASYNC_PHASE, CheckpointState, PendingCheckpoint, ending_for
from barrierflow.checkpointing.manifest import (
    AlignmentSummary,
    EventTimeSummary,
    FailureReason,
    FailureRecord,
    Manifest,
)
from barrierflow.checkpointing.reservations import release as release_reservation
from barrierflow.checkpointing.sink_notifier import SinkNotifier
from barrierflow.checkpointing.stage import BarrierBatch, StageTracker
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.checkpointing.thread_priority import background_executor
from barrierflow.checkpointing.trigger_rule import TriggerRule
from barrierflow.checkpointing.trigger_step import TriggerStep
from barrierflow.checkpointing.uploader import SnapshotUploader, UploadResult
from barrierflow.errors import BarrierflowError, CheckpointError, TolerableFailuresExceededError
from barrierflow.faults import crash_point
from barrierflow.lease import FencedOffError
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage.object_dir import ObjectDir, as_checkpoint_dir
from barrierflow.transactions.committer import SinkCommitter

log = logging.getLogger(__name__)
#: Completed manifests a coordinator keeps in memory (see ``CheckpointCoordinator.completed``).
KEEP_COMPLETED = 100

__all__ = ["AsyncResult", "CheckpointCoordinator", "CheckpointEvent", "CheckpointState", "EventTimeFn",
           "EventTimeSummaryFn",
           "PendingCheckpoint", "SinkCommitFailedError"]


@dataclass(frozen=True)
class AsyncResult:
    upload: UploadResult
    sink_handles: list[dict[str, object]]
    duration_ms: float


@dataclass(frozen=True)
class CheckpointEvent:
    checkpoint_id: int
    completed: bool
    manifest: Manifest | None = None
    failure: FailureRecord | None = None


EventTimeFn = Callable[[str, dict[str, int]], dict[str, datetime | None]]
AlignmentFn = Callable[[int], "dict[str, Any] | None"]
#: (first batch of the epoch, barrier batch, barrier offsets, max event times) -> manifest's event_time
EventTimeSummaryFn = Callable[[int, int, dict[str, dict[str, int]], dict[str, dict[str, datetime | None]]],
                              EventTimeSummary | None]


class CheckpointCoordinator(TriggerStep):
    def __init__(
        self,
        *,
        pipeline: str,
        options: CheckpointSpec,
        store: CheckpointStore,
        spark_checkpoint_dir: str | Path | ObjectDir,
        snapshot_dir: str | Path,
        control: ControlChannel,
        source_names: list[str],
        sinks: list[SinkCommitter] | None = None,
        event_times: EventTimeFn | None = None,
        event_time_summary: EventTimeSummaryFn | None = None,
        attempt: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        spark_version: str = "",
        alignment: AlignmentFn | None = None,
        commit_on_completion: bool = True,
        label: str | None = None,
    ) -> None:
        self.pipeline = pipeline
        #: How messages name the pipeline or stage (default ``pipeline <pipeline>``).
        self.label = label or f"pipeline {pipeline}"
        self.options = options
        self.store = store
        self.spark_dir = as_checkpoint_dir(spark_checkpoint_dir)
        self.snapshot_dir = Path(snapshot_dir)
        self.control = control
        self.source_names = source_names
        self.sinks = sinks or []
        self.event_times = event_times
        self.event_time_summary = event_time_summary
        self.attempt = attempt
        self.monotonic = monotonic
        self.now = now
        self.spark_version = spark_version
        #: stages fed by channels: the alignment record of checkpoint n (None until complete)
        self.alignment = alignment
        #: False in a stage of a multi-stage pipeline: the pipeline coordinator tells the sinks
        #: to commit once the *global* checkpoint is complete (:meth:`commit_sinks`)
        self.commit_on_completion = commit_on_completion
        self.stage = StageTracker(self.spark_dir, self.snapshot_dir, source_names)
        self.uploader = SnapshotUploader(store, nice=options.async_nice)
        self.notifier = SinkNotifier(self.sinks, label=self.label)
        self._async = background_executor(options.max_concurrent, "chk-async", options.async_nice)
        self.pending: dict[int, PendingCheckpoint] = {}
        #: The newest :data:`KEEP_COMPLETED` completed manifests (the store has them all): a
        #: manifest lists every file of its snapshot (~150 KB in memory for 200 files), so
        #: keeping all of them grew a long-running driver without bound (the soak benchmark).
        self.completed: list[Manifest] = []
        #: Checkpoints completed in this run (``completed`` holds only the newest).
        self.completed_count = 0
        self.failed: list[FailureRecord] = []
        self.consecutive_failures = 0
        self._next_id = 1
        self.trigger_rule = TriggerRule(options)
        self._previous_bases: dict[str, int] = {}
        #: When this coordinator was made: a barrier's recorded trigger time older than this
        #: belongs to an earlier run (a replayed barrier batch) and is not this run's trigger.
        self._created = now()
        #: Stop triggering once this many checkpoints completed or are pending (None: no limit).
        self.trigger_limit: int | None = None
        #: The forced checkpoint (:meth:`trigger_now`): its id once triggered.
        self._forced = False
        self.forced_id = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Prepare before the query starts: clear stale requests, find where ids resume."""
        self.control.reset()
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        latest = self.store.latest()
        if latest is not None:
            self._previous_bases = dict(latest.state_bases)
        ids = self.store.checkpoint_ids()
        failed = [f.checkpoint_id for f in self.store.failures()]
        highest_in_log = self.stage.resume()
        self._next_id = max([highest_in_log, *ids, *failed, self.store.highest_used_id()]) + 1
        self.trigger_rule.started(self.monotonic())

    @property
    def uploads_in_flight(self) -> int:
        return sum(1 for p in self.pending.values() if p.state in ASYNC_PHASE)

    @property
    def last_completed(self) -> Manifest | None:
        return self.completed[-1] if self.completed else None

    def current_epoch(self) -> int:
        return self.stage.last_barrier + 1

    def retune(self, *, interval: float, synchronous_upload: bool) -> None:
        """Change the checkpoint interval and the synchronous-upload baseline while the job runs
        (benchmarks that alternate modes inside one query). Takes effect with the next trigger.

        Raises :class:`CheckpointError` while a checkpoint is pending, so that no checkpoint runs
        under two settings; the caller stops triggering (``trigger_limit``) and waits first."""
        if self.pending:
            raise CheckpointError(f"cannot retune the checkpoint coordinator while checkpoints {sorted(self.pending)} "
                             "are pending: stop triggering and wait until they finished")
        if interval <= 0:
            raise CheckpointError(f"checkpoint interval must be positive (got {interval})")
        self.options = self.options.model_copy(update={"interval": interval,
                                                       "synchronous_upload": synchronous_upload})
        self.trigger_rule.options = self.options

    def trigger_now(self) -> None:
        """Trigger one checkpoint at the next tick whatever the interval, ``min_pause``,
        ``max_concurrent`` and ``trigger_limit`` say (a stop with a savepoint;
        :class:`~barrierflow.checkpointing.trigger_step.TriggerStep`); a barrier still on its way
        is let through first. Its id is :attr:`forced_id` once triggered; its failure does not
        count towards ``tolerable_failed_checkpoints`` (it fails the stop, not the job)."""
        super().trigger_now()

    # -- the tick -----------------------------------------------------------------------
    def tick(self) -> list[CheckpointEvent]:
        events: list[CheckpointEvent] = []
        self.check_sinks()
        events += self._collect_uploads()  # Step 1.
        events += self._scan_commits()  # Step 2.
        events += self._expire()  # Step 3.
        self._maybe_trigger()  # Step 4.
        if self.consecutive_failures > self.options.tolerable_failed_checkpoints:  # Step 5.
            last = self.failed[-1]
            raise TolerableFailuresExceededError(
                self.consecutive_failures, self.options.tolerable_failed_checkpoints,
                f"checkpoint {last.checkpoint_id}: {last.reason.value}: {last.message}",
            )
        return events

    def _maybe_trigger(self) -> None:
        mono = self.monotonic()
        if any(p.state is CheckpointState.TRIGGERED for p in self.pending.values()):
            return  # one barrier in flight: the offsets' barrier is sticky, a newer one would subsume it
        if not self.trigger_due(mono, pending=len(self.pending), done=self.completed_count):
            return
        cid = self._next_id
        self._next_id += 1
        self.pending[cid] = pending = PendingCheckpoint(cid, self.now(), mono)
        self.mark_triggered(cid, mono)
        self.control.request_barrier(cid, pending.trigger_time)
        log.info("checkpoint %d triggered", cid)

    def _scan_commits(self, *, force: bool = False) -> list[CheckpointEvent]:
        events: list[CheckpointEvent] = []
        for barrier in self.stage.new_barrier_batches(force=force):
            events += self._on_barrier_batch(barrier)
        return events

    def _trigger_time_of(self, barrier: BarrierBatch) -> datetime:
        """The trigger time of a checkpoint this coordinator did not trigger: the global
        checkpoint's trigger as the barrier carried it (so a downstream stage's manifest times
        its checkpoint from the same start as the pipeline's), else now (barriers of older
        releases, or one triggered before this run started: the timeout clock always starts
        now)."""
        now = self.now()
        if barrier.triggered_ms is None:
            return now
        triggered = datetime.fromtimestamp(barrier.triggered_ms / 1000.0, UTC)
        return triggered if self._created <= triggered <= now else now

    def _on_barrier_batch(self, barrier: BarrierBatch) -> list[CheckpointEvent]:
        cid, batch = barrier.checkpoint_id, barrier.batch_id
        pending = self.pending.get(cid)
        if pending is None:  # a barrier from upstream (a channel), or replayed from an earlier run
            pending = PendingCheckpoint(cid, self._trigger_time_of(barrier), self.monotonic())
            self.pending[cid] = pending
            self._next_id = max(self._next_id, cid + 1)
        for stale in [p for p in self.pending.values()
                      if p.checkpoint_id < cid and p.state is CheckpointState.TRIGGERED]:
            self._fail(stale, FailureReason.EXPIRED, f"subsumed by the barrier of checkpoint {cid}", subsumed=True)
        pending.transition(CheckpointState.BARRIER_SEEN)
        pending.barrier_time = self.now()
        pending.first_batch_id = barrier.first_batch_id
        pending.barrier_batch_ms = self.stage.barrier_batch_ms(batch)
        try:
            pending.barrier_offsets = self.stage.barrier_offsets(batch)
            pending.snapshot = self.stage.snapshot(barrier, self._previous_bases)
        except (BarrierflowError, OSError) as exc:
            return [self._fail(pending, FailureReason.SNAPSHOT_FAILED, str(exc))]
        pending.transition(CheckpointState.SNAPSHOTTED)
        pending.transition(CheckpointState.UPLOADING)
        if self.options.synchronous_upload:
            self.control.set_hold(True)
            done: Future[AsyncResult] = Future()
            try:
                done.set_result(self._async_phase(pending))
            except Exception as exc:  # reported as the checkpoint's failure
                done.set_exception(exc)
            pending.upload = done
            events = self._collect_uploads()
            self.control.set_hold(False)
            return events
        pending.upload = self._async.submit(self._async_phase, pending)
        return []

    def _async_phase(self, pending: PendingCheckpoint) -> AsyncResult:
        """Upload the snapshot's new files, then pre-commit every sink (ordered thread)."""
        snapshot = pending.snapshot
        assert snapshot is not None
        started = time.perf_counter()
        upload = self.uploader.upload(snapshot)
        pending.advance(CheckpointState.PRECOMMITTING)
        handles = self.notifier.pre_commit(snapshot.checkpoint_id, snapshot.batch_id)
        crash_point("after_precommit", pipeline=self.pipeline, checkpoint_id=snapshot.checkpoint_id)
        return AsyncResult(upload, handles, (time.perf_counter() - started) * 1000.0)

    def _collect_uploads(self) -> list[CheckpointEvent]:
        events: list[CheckpointEvent] = []
        for pending in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            if pending.upload is None or not pending.upload.done():
                continue
            if self.alignment is not None and pending.upload.exception() is None:
                record = self.alignment(pending.checkpoint_id)
                if record is None:
                    continue  # channel state still incomplete: the last barrier has not arrived
                if record.get("aborted"):
                    events.append(self._fail(pending, FailureReason.SNAPSHOT_FAILED,
                                             f"the alignment of the stage's input channels ended: {record['message']}"))
                    continue
            try:
                result = pending.upload.result()
            except SinkPreCommitError as exc:
                events.append(self._fail(pending, FailureReason.PRECOMMIT_FAILED, str(exc)))
                continue
            except FencedOffError:
                raise  # the lease was taken over: the job stops, writing nothing more
            except Exception as exc:  # any storage failure fails the checkpoint
                events.append(self._fail(pending, FailureReason.UPLOAD_FAILED, f"{type(exc).__name__}: {exc}"))
                continue
            events.append(self._complete(pending, result))
        return events

    def _complete(self, pending: PendingCheckpoint, outcome: AsyncResult) -> CheckpointEvent:
        assert pending.snapshot is not None and pending.barrier_time is not None
        snap = pending.snapshot
        result = outcome.upload
        completion = self.now()
        event_times: dict[str, dict[str, datetime | None]] = {}
        for name, parts in pending.barrier_offsets.items():
            event_times[name] = self.event_times(name, parts) if self.event_times else dict.fromkeys(parts)
        manifest = Manifest(
            pipeline=self.pipeline,
            checkpoint_id=pending.checkpoint_id,
            attempt=self.attempt,
            spark_batch_id=snap.batch_id,
            first_batch_id=pending.first_batch_id,
            state_version=snap.state_version,
            barrier_offsets=pending.barrier_offsets,
            max_event_time=event_times,
            trigger_time=pending.trigger_time,
            barrier_time=pending.barrier_time,
            completion_time=completion,
            barrier_batch_ms=round(pending.barrier_batch_ms, 3),
            sync_ms=round(snap.duration_ms, 3),
            async_ms=round(outcome.duration_ms, 3),
            total_ms=round((completion - pending.trigger_time).total_seconds() * 1000.0, 3),
            full_bytes=result.full_bytes,
            incremental_bytes=result.incremental_bytes,
            files=result.files,
            state_bases=snap.state_bases,
            sink_handles=outcome.sink_handles,
            spark_version=self.spark_version,
            alignment=(AlignmentSummary.from_record(record)
                       if self.alignment is not None and (record := self.alignment(pending.checkpoint_id)) else None),
            event_time=self._event_time_summary(pending, snap.batch_id, event_times),
        )
        try:
            self.store.write_manifest(manifest)
        except FencedOffError:
            raise
        except Exception as exc:
            return self._fail(pending, FailureReason.MANIFEST_FAILED, f"{type(exc).__name__}: {exc}")
        pending.transition(CheckpointState.COMPLETED)
        release_reservation(self.store.objects, manifest.checkpoint_id)
        del self.pending[pending.checkpoint_id]
        self.completed.append(manifest)
        self.completed_count += 1
        del self.completed[:-KEEP_COMPLETED]
        self.consecutive_failures = 0
        self.trigger_rule.ended(self.monotonic())
        self._previous_bases = dict(snap.state_bases)
        shutil.rmtree(snap.directory, ignore_errors=True)
        log.info("checkpoint %d completed (batch %d, %d B new of %d B)", manifest.checkpoint_id,
                 snap.batch_id, result.incremental_bytes, result.full_bytes)
        crash_point("after_manifest", pipeline=self.pipeline, checkpoint_id=manifest.checkpoint_id)
        if self.commit_on_completion:
            self.notifier.notify_complete(manifest.checkpoint_id, snap.batch_id)
        return CheckpointEvent(manifest.checkpoint_id, True, manifest=manifest)

    def _event_time_summary(self, pending: PendingCheckpoint, batch_id: int,
                            event_times: dict[str, dict[str, datetime | None]]) -> EventTimeSummary | None:
        """The manifest's ``event_time`` section; report metadata: a failure is logged, never fatal."""
        if self.event_time_summary is None:
            return None
        try:
            return self.event_time_summary(pending.first_batch_id, batch_id, pending.barrier_offsets, event_times)
        except Exception as exc:
            log.warning("checkpoint %d: the event-time summary could not be built (%s: %s); the manifest has none",
                        pending.checkpoint_id, type(exc).__name__, exc)
            return None

    def _expire(self) -> list[CheckpointEvent]:
        mono = self.monotonic()
        return [
            self._fail(p, FailureReason.EXPIRED, f"not completed within {self.options.timeout:g} s "
                       f"(state {p.state.value}); raise checkpoint.timeout or check the store's speed")
            for p in list(self.pending.values())
            if mono - p.trigger_mono > self.options.timeout
        ]

    def _fail(self, pending: PendingCheckpoint, reason: FailureReason, message: str, *,
              subsumed: bool = False) -> CheckpointEvent:
        state_before = pending.state
        pending.transition(ending_for(reason, subsumed=subsumed))
        self.pending.pop(pending.checkpoint_id, None)
        if pending.upload is not None:
            pending.upload.cancel()
        record = FailureRecord(
            pipeline=self.pipeline,
            checkpoint_id=pending.checkpoint_id,
            reason=reason,
            message=f"{reason.explanation}: {message}",
            trigger_time=pending.trigger_time,
            failure_time=self.now(),
            spark_batch_id=pending.snapshot.batch_id if pending.snapshot else None,
        )
        self.failed.append(record)
        if reason is not FailureReason.JOB_STOPPED and pending.checkpoint_id != self.forced_id:
            self.consecutive_failures += 1  # a failed savepoint fails the stop, not the job (as in Flink)
        self.trigger_rule.ended(self.monotonic())
        if pending.snapshot is not None:
            shutil.rmtree(pending.snapshot.directory, ignore_errors=True)
        log.warning("checkpoint %d failed (%s -> %s): %s", pending.checkpoint_id, state_before.value,
                    pending.state.value, record.message)
        self.notifier.notify_aborted(pending.checkpoint_id)
        try:
            self.store.record_failure(record)
        except Exception as exc:
            log.warning("could not record the failure of checkpoint %d in the store: %s",
                        pending.checkpoint_id, exc)
        release_reservation(self.store.objects, pending.checkpoint_id)
        return CheckpointEvent(pending.checkpoint_id, False, failure=record)

    def commit_sinks(self, checkpoint_id: int) -> bool:
        """Tell every sink that checkpoint ``checkpoint_id`` is complete (the pipeline
        coordinator calls it after the global checkpoint completed). False when this stage
        has not completed that checkpoint (nothing is told)."""
        manifest = next((m for m in self.completed if m.checkpoint_id == checkpoint_id), None)
        if manifest is None:
            return False
        self.notifier.notify_complete(checkpoint_id, manifest.spark_batch_id)
        return True

    def abort_sinks(self, checkpoint_id: int) -> None:
        """Tell every sink that checkpoint ``checkpoint_id`` failed (globally)."""
        self.notifier.notify_aborted(checkpoint_id)

    def flush_sinks(self, timeout: float = 60.0) -> None:
        """Wait until every queued sink call (commit, abort) finished; raise the first error
        (:meth:`SinkNotifier.flush`: :class:`SinkCommitFailedError` or ``FencedOffError``)."""
        self.notifier.flush(timeout)

    def check_sinks(self) -> None:
        """Raise the first error of a finished sink commit/abort (the job then stops)."""
        self.notifier.check()

    def drain(self, timeout: float) -> list[CheckpointEvent]:
        """After the query stopped: wait up to ``timeout`` s for in-flight uploads to finish
        and complete their checkpoints; whatever is still pending then fails (JOB_STOPPED).
        Then every queued sink call runs and the coordinator's threads stop.

        Raises:
            SinkCommitFailedError: a sink commit or abort queued in this run failed and no tick
                reported it (:meth:`SinkNotifier.shutdown`), such as the commit of the run's last
                checkpoint, queued by the tick that ended the run loop. Raised after everything
                above is done.
            FencedOffError: likewise, a sink call found the lease taken over.
        """
        deadline = self.monotonic() + timeout
        events: list[CheckpointEvent] = []
        events += self._scan_commits(force=True)
        while any(p.upload is not None for p in self.pending.values()) and self.monotonic() < deadline:
            events += self._collect_uploads()
            time.sleep(0.01)
        events += self._collect_uploads()
        for pending in list(self.pending.values()):
            events.append(self._fail(pending, FailureReason.JOB_STOPPED, "the job stopped first"))
        try:
            self.notifier.shutdown()
        finally:
            self._async.shutdown(wait=False, cancel_futures=True)
            self.uploader.shutdown(wait=False)
            self.control.reset()
        return events
