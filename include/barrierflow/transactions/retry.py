"""Bounded exponential backoff for committing a completed checkpoint's transactions.

A completed checkpoint's sink commit must never be skipped: its epoch's output exists only as
a pre-committed transaction (and write-ahead batches) until it commits. So a commit that fails on
an unreachable system (PostgreSQL down, S3 not answering, a broker gone) is tried again after
``initial`` seconds, then twice as long each time up to ``maximum``, ``retries`` times in all
(Flink retries its committers the same way). The commit of a two-phase-commit sink is
idempotent, so trying again after a failure half-way is safe. When the retries are used up
the last error is raised (the job then stops); the transaction stays pre-committed and
``barrierflow reconcile`` (or the next start of the job) commits it once the system is back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CommitRetry:
    """How often and how long to wait before trying a failed commit again.

    Attributes:
        retries: attempts after the first one (0: fail at once).
        initial: seconds before the first retry; each further wait doubles, up to ``maximum``.
        maximum: the longest single wait, in seconds.
        sleep: how to wait (tests pass a recorder).
    """

    retries: int = 5
    initial: float = 1.0
    maximum: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.retries < 0 or self.initial <= 0 or self.maximum < self.initial:
            raise ValueError(f"invalid commit retry policy {self!r}: need retries >= 0 and 0 < initial <= maximum")

    def delays(self) -> list[float]:
        """The waits before each retry, in order (their sum bounds the time spent waiting)."""
        return [min(self.initial * 2 ** i, self.maximum) for i in range(self.retries)]


NO_RETRY = CommitRetry(retries=0)
