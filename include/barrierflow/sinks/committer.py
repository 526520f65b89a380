"""The driver-side half of a sink that takes part in checkpoints.

A sink's Spark writer stages each micro-batch durably but invisibly; its committer, living
in the driver next to the checkpoint coordinator, is told two things:

* :meth:`SinkCommitter.pre_commit_handles` at the barrier of checkpoint n (batch V): the
  handles that let any process finish the epoch's transactions; they go into the manifest.
* :meth:`SinkCommitter.notify_checkpoint_complete` after the manifest of n is stored: make
  every staged batch <= V visible. Must be idempotent (a repeat is a no-op).
"""

from __future__ import annotations

import abc
from typing import Any


class SinkCommitter(abc.ABC):
    name: str

    @abc.abstractmethod
    def pre_commit_handles(self, barrier_batch: int) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None: ...


class NoCommitter(SinkCommitter):
    """For sinks without transactions (discard)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pre_commit_handles(self, barrier_batch: int) -> list[dict[str, Any]]:
        return []

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        return None
