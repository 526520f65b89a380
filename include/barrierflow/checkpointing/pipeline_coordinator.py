"""The pipeline coordinator: global checkpoints over the stages of a multi-stage pipeline.

Each stage runs its own :class:`~barrierflow.checkpointing.coordinator.CheckpointCoordinator`
(snapshot, upload, pre-commit, stage manifest) with triggering off and sink commits deferred
(``commit_on_completion=False``). This coordinator, driven by :meth:`PipelineCoordinator.tick`,
does what only a global view can (layout in :mod:`barrierflow.checkpointing.global_manifest`):

Step 1. Collect: a pending global checkpoint ``n`` whose every stage has its manifest ``n``
        completes: write the global manifest naming each stage's manifest (add-if-absent, after
        the lease's fencing check: a manifest already there is never overwritten, the coordinator
        raises :class:`~barrierflow.checkpointing.errors.GlobalManifestExistsError`), then tell
        the final stages (those writing no channel) to commit their 2PC sinks up to ``n``. A
        stage manifest alone never commits anything.
Step 2. Fail: a stage recorded the failure of its snapshot ``n``, or ``checkpoint.timeout``
        passed: record ``global/chk-<n>/_failed.json`` and tell the final stages to abort ``n``.
Step 3. Trigger: when :mod:`barrierflow.checkpointing.trigger_rule` allows (the interval and
        ``min_pause`` passed, fewer than ``max_concurrent`` pending; the rule a single-stage
        pipeline's coordinator triggers by), record ``_triggered.json`` for the next id, then request barrier ``n`` on
        the control channel of every source stage (stages with an external source). Barriers
        reach the other stages in-band, through the channels.

Its state lives in the checkpoint store, read and written only through
:class:`~barrierflow.checkpointing.global_store.GlobalCheckpointStore`:
:meth:`PipelineCoordinator.start` resumes ids after the highest one any global or stage
object uses, and takes up every triggered checkpoint that has neither a global manifest nor
a failure record, so a restarted coordinator completes (or expires) what it left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.global_manifest import (
    GlobalFailure,
    GlobalManifest,
    GlobalTrigger,
    StageSnapshot,
    stage_prefix,
)
from barrierflow.checkpointing.global_store import GlobalCheckpointStore, stage_snapshot
from barrierflow.checkpointing.store import CheckpointStore, failure_key, manifest_key
from barrierflow.checkpointing.trigger_rule import TriggerRule
from barrierflow.checkpointing.trigger_step import TriggerStep
from barrierflow.errors import CheckpointCorruptError
from barrierflow.faults import crash_point
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage import ObjectStore

if TYPE_CHECKING:
    from barrierflow.lease import FenceToken

log = logging.getLogger(__name__)


@dataclass
class StageHandle:
    """What the pipeline coordinator knows of one stage."""

    name: str
    store: CheckpointStore
    control: ControlChannel
    coordinator: CheckpointCoordinator | None = None
    is_source: bool = False
    is_final: bool = False


@dataclass
class PendingGlobal:
    checkpoint_id: int
    trigger_time: datetime
    trigger_mono: float


@dataclass
class GlobalEvent:
    checkpoint_id: int
    completed: bool
    manifest: GlobalManifest | None = None
    failure: GlobalFailure | None = None


@dataclass
class PipelineCoordinator(TriggerStep):
    #: A forced global checkpoint waits until none is pending (:meth:`trigger_now`).
    forced_waits_for_pending = True

    pipeline: str
    options: CheckpointSpec
    objects: ObjectStore
    stages: list[StageHandle]
    attempt: int = 0
    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    pending: dict[int, PendingGlobal] = field(default_factory=dict)
    completed: list[GlobalManifest] = field(default_factory=list)
    failed: list[GlobalFailure] = field(default_factory=list)
    #: stop triggering once this many global checkpoints completed or are pending (None: no limit)
    trigger_limit: int | None = None
    #: The pipeline lease's fencing token: checked before a global manifest is written (None: no lease).
    fence: FenceToken | None = None

    def __post_init__(self) -> None:
        self._next_id = 1
        #: The forced global checkpoint (:meth:`trigger_now`): its id once triggered.
        self._forced = False
        self.forced_id = None
        self.trigger_rule = TriggerRule(self.options)
        #: The global records (``global/chk-<n>/...``) of the pipeline: every read and write goes through it.
        self.store = GlobalCheckpointStore(self.objects, self.pipeline)

    # -- state in the store ---------------------------------------------------------------
    def start(self) -> None:
        """Resume from the store; see the module docstring."""
        highest = max([self.store.highest_used_id(), *(s.store.highest_used_id() for s in self.stages)])
        self._next_id = highest + 1
        mono = self.monotonic()
        for cid in self.store.unfinished_ids():
            try:
                trigger = self.store.trigger(cid)
            except CheckpointCorruptError as exc:
                log.warning("global checkpoint %d: its trigger record is unreadable (%s); timing it from now",
                            cid, exc)
                trigger = None
            when = trigger.trigger_time if trigger is not None else self.now()
            self.pending[cid] = PendingGlobal(cid, when, mono)
            log.info("global checkpoint %d: taken up again after a restart", cid)
        self.trigger_rule.started(mono)

    def completed_ids(self) -> list[int]:
        """Ids with a global manifest, ascending (abandoned ones included)."""
        return self.store.ids("_metadata")

    def get(self, checkpoint_id: int) -> GlobalManifest:
        """The global manifest of ``checkpoint_id`` (see :meth:`GlobalCheckpointStore.get`)."""
        return self.store.get(checkpoint_id)

    # -- the tick -------------------------------------------------------------------------
    def tick(self) -> list[GlobalEvent]:
        """Collect, fail and trigger once (module docstring); the global checkpoints decided in it.

        Raises:
            FencedOffError: the pipeline's lease was taken over; no global manifest was written.
            GlobalManifestExistsError: another writer completed a pending checkpoint first.
        """
        events: list[GlobalEvent] = []
        for pending in sorted(self.pending.values(), key=lambda p: p.checkpoint_id):
            event = self._collect(pending)  # Step 1 and Step 2.
            if event is not None:
                events.append(event)
        self._maybe_trigger()  # Step 3.
        return events

    def _collect(self, pending: PendingGlobal) -> GlobalEvent | None:
        cid = pending.checkpoint_id
        failed = [s.name for s in self.stages if s.store.objects.exists(failure_key(cid))]
        if failed:
            return self._fail(pending, "STAGE_FAILED", f"the snapshot of stage(s) {', '.join(failed)} failed "
                              f"(see {', '.join(stage_prefix(s) + failure_key(cid) for s in failed)})")
        missing = [s.name for s in self.stages if not s.store.objects.exists(manifest_key(cid))]
        if not missing:
            return self._complete(pending)
        if self.monotonic() - pending.trigger_mono > self.options.timeout:
            return self._fail(pending, "EXPIRED", f"not completed within {self.options.timeout:g} s; stages "
                              f"without a snapshot: {', '.join(missing)}")
        return None

    def _complete(self, pending: PendingGlobal) -> GlobalEvent:
        cid = pending.checkpoint_id
        snapshots: dict[str, StageSnapshot] = {
            stage.name: stage_snapshot(stage_prefix(stage.name), stage.store.get(cid)) for stage in self.stages}
        completion = self.now()
        manifest = GlobalManifest(
            pipeline=self.pipeline, checkpoint_id=cid, attempt=self.attempt, trigger_time=pending.trigger_time,
            completion_time=completion,
            total_ms=round((completion - pending.trigger_time).total_seconds() * 1000.0, 3), stages=snapshots)
        if self.fence is not None:
            self.fence.check(f"completing global checkpoint {cid}")
        self.store.write_manifest(manifest)  # add-if-absent: a second writer gets GlobalManifestExistsError
        del self.pending[cid]
        self.completed.append(manifest)
        self.trigger_rule.ended(self.monotonic())
        log.info("global checkpoint %d completed (%d stages, %.0f ms)", cid, len(snapshots), manifest.total_ms)
        crash_point("after_global_manifest", checkpoint_id=cid)
        for stage in self.stages:
            if stage.is_final and stage.coordinator is not None and not stage.coordinator.commit_sinks(cid):
                log.warning("global checkpoint %d: stage %s did not complete it in this run; its sinks commit it "
                            "when the stage recovers", cid, stage.name)
        return GlobalEvent(cid, True, manifest=manifest)

    def _fail(self, pending: PendingGlobal, reason: str, message: str) -> GlobalEvent:
        cid = pending.checkpoint_id
        failure = GlobalFailure(pipeline=self.pipeline, checkpoint_id=cid, reason=reason,  # type: ignore[arg-type]
                                message=message, failure_time=self.now())
        try:
            self.store.record_failure(failure)
        except Exception as exc:
            log.warning("could not record the failure of global checkpoint %d: %s", cid, exc)
        del self.pending[cid]
        self.failed.append(failure)
        self.trigger_rule.ended(self.monotonic())
        log.warning("global checkpoint %d failed: %s", cid, message)
        for stage in self.stages:
            if stage.is_final and stage.coordinator is not None:
                stage.coordinator.abort_sinks(cid)
        return GlobalEvent(cid, False, failure=failure)

    def trigger_now(self) -> None:
        """Trigger one global checkpoint whatever the interval, ``min_pause``, ``max_concurrent``
        and ``trigger_limit`` say (a stop with a savepoint;
        :class:`~barrierflow.checkpointing.trigger_step.TriggerStep`): at the next tick with none
        pending, else once the pending ones ended (a final stage in a process of its own commits
        global checkpoints in order, stopping at the first undecided one, and a barrier that
        overtakes an earlier one leaves that one to expire). Its id is :attr:`forced_id` once
        triggered."""
        super().trigger_now()

    def _maybe_trigger(self) -> None:
        mono = self.monotonic()
        if not self.trigger_due(mono, pending=len(self.pending), done=len(self.completed)):
            return
        cid = self._next_id
        self._next_id += 1
        trigger = GlobalTrigger(pipeline=self.pipeline, checkpoint_id=cid, attempt=self.attempt,
                                trigger_time=self.now())
        self.store.record_trigger(trigger)
        self.pending[cid] = PendingGlobal(cid, trigger.trigger_time, mono)
        self.mark_triggered(cid, mono)
        for stage in self.stages:
            if stage.is_source:
                stage.control.request_barrier(cid, trigger.trigger_time)
        log.info("global checkpoint %d triggered", cid)
