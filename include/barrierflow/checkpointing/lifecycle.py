"""The lifecycle of one checkpoint: explicit states and the transitions allowed between them.

::

    TRIGGERED ──barrier batch committed──▶ BARRIER_SEEN ──synchronous phase──▶ SNAPSHOTTED
        │                                                                        │
        │ a newer barrier arrived first                      asynchronous phase  │
        ▼                                                    starts              ▼
    SUBSUMED                 COMPLETED ◀──manifest stored── PRECOMMITTING ◀──files stored── UPLOADING

    every state that is not final ──checkpoint.timeout passed──▶ EXPIRED
    every state that is not final ──snapshot/upload/pre-commit/manifest failed, job stopped──▶ FAILED

* ``TRIGGERED`` — the coordinator asked the sources' planner for barrier n.
* ``BARRIER_SEEN`` — Spark committed the batch that carries barrier n (barrier batch V).
* ``SNAPSHOTTED`` — the synchronous phase linked the files of batch V into its snapshot directory.
* ``UPLOADING`` — the asynchronous phase stores the new files in the checkpoint store.
* ``PRECOMMITTING`` — the files are stored; the sinks pre-commit epoch n (2PC phase one).
* ``COMPLETED`` — the manifest is stored: the checkpoint is restorable; sinks may commit.
* ``FAILED``, ``EXPIRED``, ``SUBSUMED`` — final without a manifest; the
  :class:`~barrierflow.checkpointing.manifest.FailureReason` recorded in the store says why.

:data:`ALLOWED` is the whole table; :meth:`PendingCheckpoint.transition` raises
:class:`~barrierflow.checkpointing.errors.CheckpointLifecycleError` for any other move. The
asynchronous phase runs on its own thread and may race the tick thread's expiry:
:meth:`PendingCheckpoint.advance` is its way in, and it leaves a final checkpoint untouched.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from barrierflow.checkpointing.errors import CheckpointLifecycleError
from barrierflow.checkpointing.manifest import FailureReason

if TYPE_CHECKING:
    from barrierflow.checkpointing.snapshot import LocalSnapshot


class CheckpointState(enum.Enum):
    TRIGGERED = "TRIGGERED"
    BARRIER_SEEN = "BARRIER_SEEN"
    SNAPSHOTTED = "SNAPSHOTTED"
    UPLOADING = "UPLOADING"
    PRECOMMITTING = "PRECOMMITTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    EXPIRED = "EXPIRED"
    SUBSUMED = "SUBSUMED"

    @property
    def final(self) -> bool:
        return not ALLOWED[self]


_S = CheckpointState
_ENDINGS = frozenset({_S.FAILED, _S.EXPIRED})

#: state -> the states it may move to. Final states map to the empty set.
ALLOWED: Mapping[CheckpointState, frozenset[CheckpointState]] = {
    _S.TRIGGERED: frozenset({_S.BARRIER_SEEN, _S.SUBSUMED}) | _ENDINGS,
    _S.BARRIER_SEEN: frozenset({_S.SNAPSHOTTED}) | _ENDINGS,
    _S.SNAPSHOTTED: frozenset({_S.UPLOADING}) | _ENDINGS,
    _S.UPLOADING: frozenset({_S.PRECOMMITTING}) | _ENDINGS,
    _S.PRECOMMITTING: frozenset({_S.COMPLETED}) | _ENDINGS,
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.EXPIRED: frozenset(),
    _S.SUBSUMED: frozenset(),
}

#: the states in which the asynchronous phase (upload, then sinks' pre-commit) runs
ASYNC_PHASE = frozenset({_S.UPLOADING, _S.PRECOMMITTING})


def ending_for(reason: FailureReason, *, subsumed: bool = False) -> CheckpointState:
    """The final state of a checkpoint that did not complete for ``reason``."""
    if subsumed:
        return _S.SUBSUMED
    return _S.EXPIRED if reason is FailureReason.EXPIRED else _S.FAILED


@dataclass(eq=False)
class PendingCheckpoint:
    """A checkpoint between its trigger and its end; the coordinator's bookkeeping for it."""

    checkpoint_id: int
    trigger_time: datetime
    trigger_mono: float
    state: CheckpointState = CheckpointState.TRIGGERED
    snapshot: LocalSnapshot | None = None
    upload: Future[Any] | None = None
    barrier_time: datetime | None = None
    barrier_batch_ms: float = 0.0
    barrier_offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    first_batch_id: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def transition(self, target: CheckpointState) -> None:
        """Move to ``target``; raises CheckpointLifecycleError if :data:`ALLOWED` has no such edge."""
        with self._lock:
            if target not in ALLOWED[self.state]:
                raise CheckpointLifecycleError(self.checkpoint_id, self.state, target)
            self.state = target

    def advance(self, target: CheckpointState) -> bool:
        """:meth:`transition` for the asynchronous phase: False (and no change) when the
        checkpoint already ended (expired or failed on the tick thread meanwhile)."""
        with self._lock:
            if self.state.final:
                return False
            if target not in ALLOWED[self.state]:
                raise CheckpointLifecycleError(self.checkpoint_id, self.state, target)
            self.state = target
            return True
