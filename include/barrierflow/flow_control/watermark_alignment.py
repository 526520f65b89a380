"""Watermark alignment and idleness: which source partitions the next batch must not advance.

Pure: :class:`WatermarkAligner` keeps per-partition bookkeeping between batches, but every
decision is a function of its inputs (``now`` is passed in, monotonic seconds), so it is tested
without a clock. The source calls :meth:`WatermarkAligner.decide` before each batch and hands
``paused`` to :func:`barrierflow.barriers.planner.plan_batch` (``PlanRequest.paused_partitions``).

Rules (Flink's FLIP-182 and source idleness, per micro-batch):

* **Watermark** of a partition: its newest event time minus the watermark delay (the caller
  computes it at the batch's start offsets); ``None`` = no record read yet.
* **Idle**: with an ``idle_timeout``, a partition whose available offset has not grown for at
  least that long and that has nothing left to read (start >= available). Its next record
  (available grows) makes it active again at once.
* **Slowest**: the smallest watermark of the active (not idle) partitions; an active partition
  without a watermark counts as the slowest of all (it may still produce old records), exactly
  like Flink's initial ``Long.MIN_VALUE`` watermark. With no active partition nothing is paused.
* **Paused**: an active partition whose watermark is more than ``max_drift`` ahead of the
  slowest; with a slowest partition without watermark, every active partition with one.
  Idle partitions are never paused (they have nothing to read).
* **Ceiling** (with ``reach`` given: each partition's watermark at the end of the batch if it
  is not capped): ``min(reach of the active partitions) + max_drift``, the same for every
  active partition. Capping every partition there (a source that maps event time to offsets,
  the generator, does) keeps the drift at the *end* of the batch within ``max_drift``: the
  partition with the smallest reach is not capped and ends there, every other one ends at most
  ``max_drift`` past it. The slowest partition so catches up a whole batch at a time, and no
  partition overshoots; the paused set alone bounds the drift to ``max_drift`` plus one batch's
  worth of event time. No ceiling without alignment, without ``reach``, or while an active
  partition's reach is unknown.
* The paused set is recomputed at most every ``update_interval`` seconds (0 = every batch);
  in between the previous set holds (minus partitions that became idle).
* Alignment never holds a barrier: the planner injects a requested barrier whatever is paused;
  the paused partitions simply end the barrier batch where they started.

Bookkeeping per partition: number of pauses and seconds paused (a pause in progress counts up
to ``now``), since the aligner was created (i.e. since the source reader started).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class AlignmentSettings:
    """``max_drift``/``update_interval``/``idle_timeout`` in seconds; ``max_drift`` None =
    no alignment (idleness is still tracked), ``idle_timeout`` None = never idle."""

    max_drift: float | None
    update_interval: float = 0.0
    idle_timeout: float | None = None


@dataclass(frozen=True)
class PartitionAlignment:
    """One partition after a decision."""

    watermark: datetime | None
    idle: bool
    paused: bool
    pauses: int
    paused_seconds: float


@dataclass(frozen=True)
class AlignmentDecision:
    paused: frozenset[str]
    idle: frozenset[str]
    partitions: dict[str, PartitionAlignment]
    ceiling: datetime | None = None


@dataclass
class _Book:
    last_available: int | None = None
    last_growth: float = 0.0
    pauses: int = 0
    paused_seconds: float = 0.0
    paused_since: float | None = None


@dataclass
class WatermarkAligner:
    """Stateful bookkeeping, pure decisions; see the module docstring."""

    settings: AlignmentSettings
    _books: dict[str, _Book] = field(default_factory=dict)
    _paused: frozenset[str] = frozenset()
    _last_update: float | None = None

    def decide(self, now: float, start: Mapping[str, int], available: Mapping[str, int],
               watermarks: Mapping[str, datetime | None],
               reach: Mapping[str, datetime | None] | None = None) -> AlignmentDecision:
        """The partitions to pause for the batch beginning at ``start`` (see module docstring).

        Args:
            now: monotonic seconds (only differences matter).
            start: partition -> offset the batch begins at.
            available: partition -> offset up to which records exist now.
            watermarks: partition -> watermark at ``start`` (None: no record read yet).
            reach: partition -> watermark at the end of an uncapped batch (for the ceiling).
        """
        partitions = sorted(set(start) | set(available) | set(watermarks))
        idle = frozenset(p for p in partitions if self._observe_idle(p, now, start, available))
        active = [p for p in partitions if p not in idle]
        due = (self._last_update is None or now - self._last_update >= self.settings.update_interval)
        if due:
            self._last_update = now
            paused = self._compute_paused(active, watermarks)
        else:
            paused = frozenset(p for p in self._paused if p not in idle)
        self._account(now, paused)
        self._paused = paused
        return AlignmentDecision(paused, idle, {
            p: PartitionAlignment(watermarks.get(p), p in idle, p in paused, self._books[p].pauses,
                                  round(self._paused_seconds(p, now), 3))
            for p in partitions
        }, self._ceiling(active, paused, watermarks, reach))

    def _ceiling(self, active: list[str], paused: frozenset[str], watermarks: Mapping[str, datetime | None],
                 reach: Mapping[str, datetime | None] | None) -> datetime | None:
        drift = self.settings.max_drift
        if drift is None or reach is None or not active:
            return None
        ends = [watermarks.get(p) if p in paused else reach.get(p) for p in active]  # paused ones stay put
        if any(e is None for e in ends):
            return None
        return min(e for e in ends if e is not None) + timedelta(seconds=drift)

    def _observe_idle(self, p: str, now: float, start: Mapping[str, int], available: Mapping[str, int]) -> bool:
        book = self._books.setdefault(p, _Book(last_growth=now))
        offered = available.get(p, start.get(p, 0))
        if book.last_available is None or offered > book.last_available:
            book.last_growth = now
        book.last_available = offered
        timeout = self.settings.idle_timeout
        if timeout is None:
            return False
        drained = start.get(p, 0) >= offered
        return drained and now - book.last_growth >= timeout

    def _compute_paused(self, active: list[str], watermarks: Mapping[str, datetime | None]) -> frozenset[str]:
        drift = self.settings.max_drift
        if drift is None or not active:
            return frozenset()
        known = [watermarks[p] for p in active if watermarks.get(p) is not None]
        if len(known) < len(active):  # an active partition without a watermark is the slowest
            return frozenset(p for p in active if watermarks.get(p) is not None)
        slowest = min(w for w in known if w is not None)
        limit = slowest + timedelta(seconds=drift)
        return frozenset(p for p in active if (w := watermarks.get(p)) is not None and w > limit)

    def _account(self, now: float, paused: frozenset[str]) -> None:
        for p, book in self._books.items():
            if p in paused and book.paused_since is None:
                book.pauses += 1
                book.paused_since = now
            elif p not in paused and book.paused_since is not None:
                book.paused_seconds += now - book.paused_since
                book.paused_since = None

    def _paused_seconds(self, p: str, now: float) -> float:
        book = self._books[p]
        return book.paused_seconds + (now - book.paused_since if book.paused_since is not None else 0.0)
