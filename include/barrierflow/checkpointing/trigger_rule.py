"""When the next checkpoint may be triggered: the one rule of both coordinators.

A stage's :class:`~barrierflow.checkpointing.coordinator.CheckpointCoordinator` (a single-stage
pipeline) and the :class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator`
(global checkpoints of several stages) trigger by the same rule, as Flink's
``CheckpointRequestDecider`` does for its periodic trigger. A checkpoint may be triggered when

* fewer than ``checkpoint.max_concurrent`` checkpoints are pending;
* at least ``checkpoint.interval`` has passed since the last trigger (a run's start counts as
  one: its first checkpoint comes an interval after it starts);
* at least ``checkpoint.min_pause`` has passed since the last checkpoint *ended*, completed or
  failed (docs/pipeline-spec.md: "between the end of one checkpoint and the next trigger");
* fewer than ``limit`` checkpoints are completed or pending in this run (a run bounded by a
  number of checkpoints; None: no limit).

Times are the caller's monotonic clock (seconds). The rule holds no checkpoint state of its
own: callers tell it when they triggered (:meth:`TriggerRule.triggered`) and when a checkpoint
ended (:meth:`TriggerRule.ended`).
"""

from __future__ import annotations

from dataclasses import dataclass

from barrierflow.spec.models import CheckpointSpec


@dataclass
class TriggerRule:
    """The trigger rule of the module docstring over ``options``' interval, min pause and
    concurrency."""

    options: CheckpointSpec
    last_trigger: float | None = None
    last_end: float | None = None

    def started(self, now: float) -> None:
        """A run started at ``now``: the first trigger comes an interval later, and no
        checkpoint of this run has ended yet."""
        self.last_trigger, self.last_end = now, None

    def due(self, now: float, *, pending: int, done: int = 0, limit: int | None = None) -> bool:
        """Whether a checkpoint may be triggered at ``now`` with ``pending`` checkpoints pending
        and ``done`` completed in this run (counted against ``limit``)."""
        if limit is not None and done + pending >= limit:
            return False
        if pending >= self.options.max_concurrent:
            return False
        if self.last_trigger is not None and now - self.last_trigger < self.options.interval:
            return False
        return self.last_end is None or now - self.last_end >= self.options.min_pause

    def triggered(self, now: float) -> None:
        """A checkpoint was triggered at ``now``."""
        self.last_trigger = now

    def ended(self, now: float) -> None:
        """A checkpoint completed or failed at ``now`` (``min_pause`` counts from here)."""
        self.last_end = now
