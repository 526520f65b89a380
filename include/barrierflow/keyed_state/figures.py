"""Keys a stage's keyed functions started and expired in one run, counted where it happens.

Spark's progress of a Python ``transformWithState`` operator does not count the timers that fired
(its ``numExpiredTimers`` stays 0: the timers fire in the Python worker), and its rows in state
count every state variable, not keys. So barrierflow's processor counts them itself, in two
PySpark accumulators created on the driver (:meth:`KeyCounters.on`) and carried to the workers
inside the processor: ``started`` (a key got state: a new key, or one whose state had expired)
and ``expired`` (a key's state expired by its ``ttl``). Spark adds a task's increments to the
driver's value when the task succeeds, so a failed task adds nothing; a batch replayed after a
restore in the same run counts again.

Contract: :attr:`KeyCounters.attached` is True once a keyed function of the stage was planned
with the counters (:func:`barrierflow.keyed_state.apply.apply_keyed_function`); until then the
stage has no keyed function and its figures are not reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KeyCounters", "KeyFigures"]


@dataclass(frozen=True)
class KeyFigures:
    """Keys started and expired by a stage's keyed functions since its run started."""

    started: int
    expired: int


class KeyCounters:
    """The two accumulators (module docstring). Pickled with the processor: a worker gets the
    accumulators (which Spark sends back per task), never :attr:`attached`."""

    def __init__(self, started: Any, expired: Any) -> None:
        self.started = started
        self.expired = expired
        self.attached = False

    @classmethod
    def on(cls, spark: SparkSession) -> KeyCounters:
        """Two new accumulators (at 0) on ``spark``'s context."""
        context = spark.sparkContext
        return cls(context.accumulator(0), context.accumulator(0))

    def __getstate__(self) -> dict[str, Any]:
        return {"started": self.started, "expired": self.expired}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.started, self.expired, self.attached = state["started"], state["expired"], False

    def figures(self) -> KeyFigures | None:
        """The driver's counts (None: no keyed function was planned with these counters)."""
        if not self.attached:
            return None
        return KeyFigures(int(self.started.value), int(self.expired.value))
