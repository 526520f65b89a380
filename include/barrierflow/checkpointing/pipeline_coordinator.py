"""The pipeline coordinator: global checkpoints over the stages of a multi-stage pipeline.

Each stage runs its own :class:`~barrierflow.checkpointing.coordinator.CheckpointCoordinator`
(snapshot, upload, pre-commit, stage manifest) with triggering off and sink commits deferred
(``commit_on_completion=False``). This coordinator, driven by :meth:`PipelineCoordinator.tick`,
does what only a global view can (layout in :mod:`barrierflow.checkpointing.global_manifest`):

Step 1. Collect: a pending global checkpoint ``n`` whose every stage has its manifest ``n``
        completes: write the global manifest naming each stage's manifest, then tell the final
        stages (those writing no channel) to commit their 2PC sinks up to ``n``. A stage
        manifest alone never commits anything.
Step 2. Fail: a stage recorded the failure of its snapshot ``n``, or ``checkpoint.timeout``
        passed: record ``global/chk-<n>/_failed.json`` and tell the final stages to abort ``n``.
Step 3. Trigger: when the interval passed and fewer than ``max_concurrent`` global checkpoints
        are pending, record ``_triggered.json`` for the next id, then request barrier ``n`` on
        the control channel of every source stage (stages with an external source). Barriers
        reach the other stages in-band, through the channels.

Its state lives in the checkpoint store: :meth:`PipelineCoordinator.start` resumes ids after
the highest one any global or stage object uses, and takes up every triggered checkpoint
that has neither a global manifest nor a failure record, so a restarted coordinator
completes (or expires) what it left.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.global_manifest import (
    GlobalFailure,
    GlobalManifest,
    GlobalTrigger,
    StageSnapshot,
    global_key,
    stage_prefix,
)
from barrierflow.checkpointing.store import CheckpointStore, failure_key, manifest_key
from barrierflow.faults import crash_point
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage import ObjectNotFoundError, ObjectStore

if TYPE_CHECKING:
    from barrierflow.workdir.lease import FenceToken

log = logging.getLogger(__name__)
_GLOBAL = re.compile(r"^global/chk-(\d+)/(_metadata|_triggered|_failed)\.json$")


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
class PipelineCoordinator:
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
        self._last_trigger_mono: float | None = None

    # -- state in the store ---------------------------------------------------------------
    def _global_ids(self) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {"_metadata": set(), "_triggered": set(), "_failed": set()}
        for info in self.objects.list("global/"):
            match = _GLOBAL.match(info.key)
            if match:
                found[match.group(2)].add(int(match.group(1)))
        return found

    def start(self) -> None:
        """Resume from the store; see the module docstring."""
        ids = self._global_ids()
        highest = max([0, *ids["_metadata"], *ids["_triggered"], *ids["_failed"],
                       *(s.store.highest_used_id() for s in self.stages)])
        self._next_id = highest + 1
        mono = self.monotonic()
        for cid in sorted(ids["_triggered"] - ids["_metadata"] - ids["_failed"]):
            trigger = self._read(global_key(cid, "_triggered"), GlobalTrigger)
            when = trigger.trigger_time if trigger is not None else self.now()
            self.pending[cid] = PendingGlobal(cid, when, mono)
            log.info("global checkpoint %d: taken up again after a restart", cid)
        self._last_trigger_mono = mono

    def _read(self, key: str, model: type[BaseModel]) -> BaseModel | None:
        try:
            return model.model_validate_json(self.objects.get_bytes(key))
        except (ObjectNotFoundError, ValidationError):
            return None

    def completed_ids(self) -> list[int]:
        return sorted(self._global_ids()["_metadata"])

    def get(self, checkpoint_id: int) -> GlobalManifest:
        return GlobalManifest.model_validate_json(self.objects.get_bytes(global_key(checkpoint_id, "_metadata")))

    # -- the tick -------------------------------------------------------------------------
    def tick(self) -> list[GlobalEvent]:
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
        snapshots: dict[str, StageSnapshot] = {}
        for stage in self.stages:
            manifest = stage.store.get(cid)
            alignment = manifest.alignment
            snapshots[stage.name] = StageSnapshot(
                manifest=stage_prefix(stage.name) + manifest_key(cid), spark_batch_id=manifest.spark_batch_id,
                mode=alignment.mode if alignment else None, alignment_ms=alignment.alignment_ms if alignment else 0.0,
                sync_ms=manifest.sync_ms, async_ms=manifest.async_ms,
                channel_state_records=alignment.channel_state_records if alignment else 0)
        completion = self.now()
        manifest = GlobalManifest(
            pipeline=self.pipeline, checkpoint_id=cid, attempt=self.attempt, trigger_time=pending.trigger_time,
            completion_time=completion,
            total_ms=round((completion - pending.trigger_time).total_seconds() * 1000.0, 3), stages=snapshots)
        key = global_key(cid, "_metadata")
        if self.fence is not None:
            self.fence.check(f"completing global checkpoint {cid}")
        if not self.objects.exists(key):
            self.objects.put_bytes(key, manifest.model_dump_json(indent=2).encode())
        del self.pending[cid]
        self.completed.append(manifest)
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
            self.objects.put_bytes(global_key(cid, "_failed"), failure.model_dump_json(indent=2).encode())
        except Exception as exc:
            log.warning("could not record the failure of global checkpoint %d: %s", cid, exc)
        del self.pending[cid]
        self.failed.append(failure)
        log.warning("global checkpoint %d failed: %s", cid, message)
        for stage in self.stages:
            if stage.is_final and stage.coordinator is not None:
                stage.coordinator.abort_sinks(cid)
        return GlobalEvent(cid, False, failure=failure)

    def _maybe_trigger(self) -> None:
        mono = self.monotonic()
        if self.trigger_limit is not None and len(self.completed) + len(self.pending) >= self.trigger_limit:
            return
        if len(self.pending) >= self.options.max_concurrent:
            return
        if self._last_trigger_mono is not None and mono - self._last_trigger_mono < self.options.interval:
            return
        cid = self._next_id
        self._next_id += 1
        trigger = GlobalTrigger(pipeline=self.pipeline, checkpoint_id=cid, attempt=self.attempt,
                                trigger_time=self.now())
        self.objects.put_bytes(global_key(cid, "_triggered"), trigger.model_dump_json().encode())
        self.pending[cid] = PendingGlobal(cid, trigger.trigger_time, mono)
        self._last_trigger_mono = mono
        for stage in self.stages:
            if stage.is_source:
                stage.control.request_barrier(cid)
        log.info("global checkpoint %d triggered", cid)
