"""Keys a stage's keyed functions started and expired in one run, counted where it happens.

Spark's progress of a Python ``transformWithState`` operator does not count the timers that fired
(its ``numExpiredTimers`` stays 0: the timers fire in the Python worker), and its rows in state
count every state variable, not keys. So barrierflow's processor counts them itself, in two
PySpark accumulators created on the driver (:meth:`KeyCounters.on`) and carried to the workers
inside the processor: ``started`` (a key got state: a new key, or one whose state had expired)
and ``expired`` (a key's state expired by its ``ttl``). Spark adds a task's increments to the
driver's value when the task succeeds, so a failed task adds nothing; a batch replayed after a
restore in the same run counts again.

The live keys are the keys in the state when the query started (counted once with Spark's state
reader, :func:`barrierflow.state.live_keys.keys_in_state`) plus those started minus those expired
since.

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
    """Keys started and expired by a stage's keyed functions since its run started, and the
    keys in its state now (None: not known: the state's count at the query's start could not be
    read)."""

    started: int
    expired: int
    live: int | None = None


class KeyCounters:
    """The two accumulators (module docstring). Pickled with the processor: a worker gets the
    accumulators (which Spark sends back per task), never :attr:`attached`."""

    def __init__(self, started: Any, expired: Any) -> None:
        self.started = started
        self.expired = expired
        self.attached = False
        #: keys in the state when the query (re)started, and the counts then (:meth:`restarted`)
        self._at_start: int | None = None
        self._base = (0, 0)

    @classmethod
    def on(cls, spark: SparkSession) -> KeyCounters:
        """Two new accumulators (at 0) on ``spark``'s context."""
        context = spark.sparkContext
        return cls(context.accumulator(0), context.accumulator(0))

    def __getstate__(self) -> dict[str, Any]:
        return {"started": self.started, "expired": self.expired}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.started, self.expired, self.attached = state["started"], state["expired"], False
        self._at_start, self._base = None, (0, 0)

    def restarted(self, keys_in_state: int | None) -> None:
        """The query starts (again) on a state holding ``keys_in_state`` keys (None: unknown):
        the live keys are counted from there (a restore within the run rolled the state back,
        while the run's counters go on)."""
        self._at_start = keys_in_state
        self._base = (int(self.started.value), int(self.expired.value))

    def figures(self) -> KeyFigures | None:
        """The driver's counts (None: no keyed function was planned with these counters)."""
        if not self.attached:
            return None
        started, expired = int(self.started.value), int(self.expired.value)
        live = (None if self._at_start is None
                else self._at_start + (started - self._base[0]) - (expired - self._base[1]))
        return KeyFigures(started, expired, live)
