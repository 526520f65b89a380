"""The control channel between the checkpoint coordinator and the sources' batch planner.

The coordinator runs in the driver's Python process; a Python source's ``latestOffset`` runs
in a separate long-lived Python worker on the driver host. They share a directory:

* ``barrier-request.json`` — ``{"checkpoint_id": n, "requested_at": ISO-8601, "triggered_at":
  ISO-8601}``, the newest checkpoint the coordinator wants a barrier for and when it was
  triggered (the planner records it in the barrier batch's offsets). Written atomically (temp + rename). The
  planner injects barrier n into the next batch if n is newer than the sticky barrier in the
  batch's start offset (see :mod:`barrierflow.barriers.offsets`).
* ``hold`` — while this file exists the planner admits no new data (used by the synchronous
  snapshot baseline, where processing waits for the upload, and by a stage's stop, so that the
  query is stopped with no batch planned and not committed:
  :meth:`barrierflow.runtime.stage_runner.StageRunner.stop_query`).
* ``barriers-only`` — while this file exists the planner admits no new data but still injects a
  requested barrier, in a batch that reads nothing (a stop's savepoint then waits for no more
  input; an upgrade's canary reads no input beyond a checkpoint not yet verified).
* ``replay.json`` — the :class:`~barrierflow.barriers.replay_plan.ReplayPlan` a restore leaves when
  committed epochs must be replayed with their output suppressed. Written by ``restore``
  only; :meth:`ControlChannel.reset` keeps it (it belongs to the restored state).

The coordinator calls :meth:`ControlChannel.reset` before it starts the query, so a request
left over from a crashed run is never re-injected.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from barrierflow.atomic_files import write_atomic
from barrierflow.barriers.offsets import SourceOffset
from barrierflow.barriers.replay_plan import ReplayPlan
from barrierflow.errors import CheckpointCorruptError


@dataclass(frozen=True)
class BarrierRequest:
    """A barrier request: checkpoint ``checkpoint_id`` (0: none), triggered at
    ``triggered_ms`` (Unix epoch, ms; None: not recorded)."""

    checkpoint_id: int
    triggered_ms: int | None


class ControlChannel:
    """The shared directory between the coordinator and the planner; see the module docstring."""

    REQUEST = "barrier-request.json"
    HOLD = "hold"
    BARRIERS_ONLY = "barriers-only"
    REPLAY = "replay.json"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def reset(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in (self.REQUEST, self.HOLD, self.BARRIERS_ONLY):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()

    def request_barrier(self, checkpoint_id: int, triggered_at: datetime | None = None) -> None:
        """Ask for barrier ``checkpoint_id``, triggered at ``triggered_at`` (default: now)."""
        now = datetime.now(UTC)
        body = json.dumps({"checkpoint_id": checkpoint_id, "requested_at": now.isoformat(),
                           "triggered_at": (triggered_at or now).isoformat()})
        write_atomic(self.directory / self.REQUEST, body)

    def requested_barrier(self) -> int:
        return self.barrier_request().checkpoint_id

    def barrier_request(self) -> BarrierRequest:
        """The newest request (checkpoint 0: none, or unreadable)."""
        try:
            body = json.loads((self.directory / self.REQUEST).read_text(encoding="utf-8"))
            checkpoint_id = int(body["checkpoint_id"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return BarrierRequest(0, None)
        try:
            triggered = datetime.fromisoformat(body["triggered_at"])
            triggered_ms = round(triggered.timestamp() * 1000) if triggered.tzinfo is not None else None
        except (KeyError, TypeError, ValueError):
            triggered_ms = None  # a request written before it carried the trigger time
        return BarrierRequest(checkpoint_id, triggered_ms)

    def set_barriers_only(self, on: bool) -> None:
        """Admit no new data, but inject requested barriers (``on``), or admit data again."""
        path = self.directory / self.BARRIERS_ONLY
        if on:
            self.directory.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def barriers_only(self) -> bool:
        return (self.directory / self.BARRIERS_ONLY).exists()

    def set_hold(self, hold: bool) -> None:
        path = self.directory / self.HOLD
        if hold:
            path.touch()
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def is_held(self) -> bool:
        return (self.directory / self.HOLD).exists()

    def set_replay_plan(self, plan: ReplayPlan | None) -> None:
        """Store (atomically) or, with None, remove the replay plan."""
        path = self.directory / self.REPLAY
        if plan is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        write_atomic(path, plan.to_json())

    def replay_plan(self) -> ReplayPlan | None:
        """The replay plan a restore left, or None."""
        path = self.directory / self.REPLAY
        try:
            return ReplayPlan.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointCorruptError(
                f"the replay plan {path} is unreadable ({exc}); it was written by 'barrierflow restore': "
                "stop the job and run the restore again (the same checkpoint) to rewrite it"
            ) from None


def replay_end(control: ControlChannel, start: SourceOffset) -> dict[str, int] | None:
    """The recorded end of the batch beginning at ``start`` while a replay plan is active
    (the planner's ``PlanRequest.replay_end``); None when there is no plan or it is over."""
    plan = control.replay_plan()
    return plan.next_end(start.partitions) if plan is not None else None
