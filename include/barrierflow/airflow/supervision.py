"""The deferrable waits of the barrierflow DAGs: triggers that run in Airflow's triggerer.

* :class:`PipelineWatchTrigger`: what the launch task defers to once it started the pipeline
  detached (:mod:`barrierflow.ops.detached_launch`). Every ``poll_seconds`` it looks at the
  launch and the pipeline (:func:`barrierflow.ops.pipeline_watch.observe`: the launcher's exit
  record, whether the launcher runs, the lease's heartbeat, the newest completed checkpoint)
  and fires one event once :func:`~barrierflow.ops.pipeline_watch.decide` says ``finished``,
  ``failed``, ``stalled`` or ``lost`` (payload: outcome, message, launch id, log, record path). The task holds no
  worker slot meanwhile. A look that fails (the store briefly unreadable) is logged and
  repeated, never an event.
* :class:`FirstCheckpointTrigger`: the recovery DAG's wait for the first completed checkpoint of
  the restored attempt; fires ``{"checkpoint_id": N}``. Its timeout is the deferral's
  (``wait_seconds``).

Both hold only their serialized arguments: after a restart of the triggerer (or of all of
Airflow) the trigger is rebuilt from the metadata database and looks again; the pipeline's own
files are the state. The time comes from :meth:`PipelineWatchTrigger.now`, which a test replaces.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: How often the watch logs that the pipeline still runs (a verdict is logged at once).
RUNNING_LOG_SECONDS = 600.0


def _home(barrierflow_home: str) -> None:
    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)


class VerdictWatchTrigger(BaseTrigger):
    """A watch that looks every :attr:`poll_seconds` until a look gives a verdict other than
    ``running``, then fires one event with it. A subclass says how to look (:meth:`look`) and
    what it watches (:attr:`watched`, named when a look fails: a look that fails is logged and
    repeated, never an event). The running state is logged on the first look and then at most
    every :data:`RUNNING_LOG_SECONDS`; a verdict always."""

    poll_seconds: float = 10.0

    @property
    def watched(self) -> str:
        """What a failed look's warning names."""
        raise NotImplementedError

    @staticmethod
    def now() -> datetime:
        """The current time (UTC); replaced by a test's clock."""
        return datetime.now(UTC)

    def look(self, now: datetime) -> tuple[str, str, dict[str, Any]]:
        """One look at ``now`` (blocking I/O): the outcome, its message and the event's payload."""
        raise NotImplementedError

    def check(self) -> dict[str, Any] | None:
        """One look (blocking I/O: run in a thread): the event's payload, or None while the
        watched pipeline runs as it should."""
        now = self.now()
        outcome, message, event = self.look(now)
        if outcome != "running":
            self.log.info("%s: %s", outcome, message)
            return event
        logged = getattr(self, "_running_logged_at", None)
        if logged is None or (now - logged).total_seconds() >= RUNNING_LOG_SECONDS:
            self.log.info("running: %s", message)
            self._running_logged_at = now
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                event = await asyncio.to_thread(self.check)
            except Exception as exc:  # a store (or API) briefly unreadable must not end the watch
                self.log.warning("cannot look at %s: %s", self.watched, exc)
                event = None
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_seconds)


class PipelineWatchTrigger(VerdictWatchTrigger):
    """Watch one detached launch (see the module docstring).

    Args:
        record_path: the launch's record (``<work_dir>/launches/<launch_id>.json``).
        barrierflow_home: where relative paths in the spec resolve.
        stall_after_seconds: report ``stalled`` after this long without a completed checkpoint.
        lost_after_seconds: seen from another host than the launcher's, report ``failed`` after
            this long without a heartbeat or an exit record.
        poll_seconds: time between two looks.
        relaunch: the launch may be relaunched after a lost launcher (the spec has a ``restart:``
            block): such a loss is reported ``lost`` once the pipeline's lease is not live
            (:func:`~barrierflow.ops.pipeline_watch.decide`), not ``failed``.
    """

    def __init__(self, *, record_path: str, barrierflow_home: str, stall_after_seconds: float,
                 lost_after_seconds: float, poll_seconds: float = 10.0, relaunch: bool = False) -> None:
        super().__init__()
        self.record_path = record_path
        self.barrierflow_home = barrierflow_home
        self.stall_after_seconds = stall_after_seconds
        self.lost_after_seconds = lost_after_seconds
        self.poll_seconds = poll_seconds
        self.relaunch = relaunch

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "record_path": self.record_path, "barrierflow_home": self.barrierflow_home,
            "stall_after_seconds": self.stall_after_seconds, "lost_after_seconds": self.lost_after_seconds,
            "poll_seconds": self.poll_seconds, "relaunch": self.relaunch})

    @property
    def watched(self) -> str:
        return f"the launch {self.record_path}"

    def look(self, now: datetime) -> tuple[str, str, dict[str, Any]]:
        """The launch's verdict (:func:`barrierflow.ops.pipeline_watch.decide`) at ``now``."""
        from barrierflow.ops.detached_launch import LaunchRecord
        from barrierflow.ops.pipeline_watch import decide, observe

        _home(self.barrierflow_home)
        record = LaunchRecord.read(self.record_path)
        verdict = decide(observe(record, now), stall_after=self.stall_after_seconds,
                         lost_after=self.lost_after_seconds, relaunch=self.relaunch)
        return verdict.outcome, verdict.message, verdict.as_event(record)


class FirstCheckpointTrigger(BaseTrigger):
    """Fires ``{"checkpoint_id": N}`` once the pipeline at ``spec_path`` has a completed
    checkpoint of ``attempt`` (or later), looking every ``poll_seconds``."""

    def __init__(self, *, spec_path: str, barrierflow_home: str, attempt: int, poll_seconds: float = 30.0) -> None:
        super().__init__()
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home
        self.attempt = attempt
        self.poll_seconds = poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "spec_path": self.spec_path, "barrierflow_home": self.barrierflow_home, "attempt": self.attempt,
            "poll_seconds": self.poll_seconds})

    def check(self) -> int | None:
        """The first completed checkpoint of the attempt, or None (blocking I/O)."""
        from barrierflow.airflow.runbook import first_checkpoint_of_attempt

        _home(self.barrierflow_home)
        return first_checkpoint_of_attempt(self.spec_path, self.attempt)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                found = await asyncio.to_thread(self.check)
            except Exception as exc:
                self.log.warning("cannot list the checkpoints of %s: %s", self.spec_path, exc)
                found = None
            if found is not None:
                yield TriggerEvent({"checkpoint_id": found})
                return
            self.log.info("no completed checkpoint of attempt %d yet", self.attempt)
            await asyncio.sleep(self.poll_seconds)
