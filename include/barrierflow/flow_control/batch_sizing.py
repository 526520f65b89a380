"""Adaptive batch sizing: how many records per partition the next batch may take so that it
runs for about ``target_seconds`` (the micro-batch analogue of Flink's buffer debloating: keep
about one target duration of data in flight, so a barrier waits at most about one batch).

Pure: :class:`BatchSizer` is told what each planned batch took (records, and the seconds from
its planning to the planning of the next one, i.e. its run time plus any wait for the
trigger) and answers :meth:`BatchSizer.cap`, the per-partition ``max_records_per_partition``
for :func:`barrierflow.barriers.planner.plan_batch`.

Model: a batch of ``n`` records takes ``t = fixed + n * per_record`` (a micro-batch has a
fixed cost of 0.3-0.5 s and more under load), fitted by least squares over the newest
``window`` measured batches (batches that planned nothing are not measured):

* the next batch takes ``n = budget / per_record`` records, ``budget = max(target - fixed,
  target / 2)``: about the target, and when the fixed cost alone exceeds the target, half the
  target on top of it (shrinking further would only lose throughput, not time);
* while the sizes seen do not differ enough to fit (the first batches), or time does not grow
  with size, the next batch is twice the last one (probing upwards);
* a batch is at most ``4x`` and at least half the previous one (damps timing noise on a
  loaded machine); the per-partition cap is ``ceil(n / partitions with
  records to read)``, bounded below by ``minimum`` and above by ``maximum`` (the source's
  ``max_records_per_batch``); before the first measurement it is ``minimum``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

#: the smallest per-partition cap the sizer plans
MIN_RECORDS_PER_PARTITION = 1_000
_GROWTH = 4.0
_PROBE = 2.0


@dataclass
class BatchSizer:
    target_seconds: float
    maximum: int
    minimum: int = MIN_RECORDS_PER_PARTITION
    window: int = 6
    _measured: deque[tuple[int, float]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.target_seconds <= 0:
            raise ValueError(f"target_seconds must be > 0, got {self.target_seconds}")
        self.minimum = max(1, min(self.minimum, self.maximum))

    def measured(self, records: int, seconds: float) -> None:
        """Record one batch: ``records`` planned, ``seconds`` from its planning to the next."""
        if records <= 0 or seconds <= 0:
            return
        self._measured.append((records, seconds))
        while len(self._measured) > self.window:
            self._measured.popleft()

    def fit(self) -> tuple[float, float] | None:
        """``(fixed seconds, seconds per record)`` over the window, or None when the sizes do
        not differ by at least 20 % or time does not grow with size."""
        if len(self._measured) < 2:
            return None
        sizes = [n for n, _ in self._measured]
        if max(sizes) < 1.2 * min(sizes):
            return None
        mean_n = sum(sizes) / len(sizes)
        mean_t = sum(t for _, t in self._measured) / len(self._measured)
        var = sum((n - mean_n) ** 2 for n in sizes)
        slope = sum((n - mean_n) * (t - mean_t) for n, t in self._measured) / var
        if slope <= 0:
            return None
        return max(0.0, mean_t - slope * mean_n), slope

    def next_records(self) -> float | None:
        """Records (all partitions) the next batch should take; None before any measurement."""
        if not self._measured:
            return None
        last = self._measured[-1][0]
        model = self.fit()
        if model is None:
            return last * _PROBE
        fixed, per_record = model
        budget = max(self.target_seconds - fixed, self.target_seconds / 2)
        return min(max(budget / per_record, last / 2), last * _GROWTH)

    def cap(self, partitions_with_data: int) -> int:
        """Per-partition record cap of the next batch; see the module docstring."""
        total = self.next_records()
        if total is None:
            return self.minimum
        share = math.ceil(total / max(1, partitions_with_data))
        return max(self.minimum, min(self.maximum, share))
