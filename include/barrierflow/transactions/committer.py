"""The driver-side half of a sink that takes part in checkpoints.

A sink's Spark writer stages each micro-batch durably but invisibly; its committer, living
in the driver next to the checkpoint coordinator, is called in order (one step after the
other; within a commit or abort step the sinks of a stage may be called side by side, each
on a thread of its own, :mod:`barrierflow.checkpointing.sink_notifier`):

* :meth:`SinkCommitter.pre_commit_epoch` in the asynchronous phase of checkpoint n (barrier
  batch V), before the manifest is written: pre-commit the epoch (2PC phase one); returns the
  handles that let any process finish it, stored in the manifest.
* :meth:`SinkCommitter.notify_checkpoint_complete` after the manifest of n is stored: make
  every pre-committed epoch <= n visible. Must be idempotent (a repeat is a no-op).
* :meth:`SinkCommitter.notify_checkpoint_aborted` when checkpoint n failed.
"""

from __future__ import annotations

import abc
from typing import Any


class SinkCommitter(abc.ABC):
    """The interface the checkpoint coordinator calls; see the module docstring."""

    name: str

    @abc.abstractmethod
    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None: ...

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        return None


class NoCommitter(SinkCommitter):
    """For sinks without transactions (discard)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        return []

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        return None


class HeldCommits(SinkCommitter):
    """A sink whose epochs are pre-committed but never committed (an upgrade's canary,
    :mod:`barrierflow.upgrade.canary`): each epoch is pre-committed at its checkpoint (durable,
    invisible, in the ledger as PRECOMMITTED, its handle in the manifest); a completed
    checkpoint is only remembered (:attr:`held`); a failed one is aborted as usual. Whoever
    holds them decides later: a reconciliation against a newer cut commits them, a restore of
    an older one aborts them."""

    def __init__(self, inner: SinkCommitter) -> None:
        self.inner = inner
        self.name = inner.name
        self.held: list[int] = []

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        return self.inner.pre_commit_epoch(checkpoint_id, barrier_batch)

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        self.held.append(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.inner.notify_checkpoint_aborted(checkpoint_id)
