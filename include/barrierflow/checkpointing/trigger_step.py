"""The trigger step both coordinators share: the trigger rule, the run's limit and the forced trigger.

A stage's :class:`~barrierflow.checkpointing.coordinator.CheckpointCoordinator` and the
:class:`~barrierflow.checkpointing.pipeline_coordinator.PipelineCoordinator` decide whether to
trigger the next checkpoint in one place, :meth:`TriggerStep.trigger_due`:

* normally by :class:`~barrierflow.checkpointing.trigger_rule.TriggerRule` (interval,
  ``min_pause``, ``max_concurrent``) within ``trigger_limit`` (None: no limit; a stop sets 0);
* after :meth:`TriggerStep.trigger_now` (a stop with a savepoint) once, whatever the rule and the
  limit say; a coordinator whose forced checkpoint must wait until none is pending says so with
  :attr:`TriggerStep.forced_waits_for_pending`. The id the forced checkpoint got is
  :attr:`TriggerStep.forced_id` once :meth:`TriggerStep.mark_triggered` recorded it.

The caller keeps its own other conditions (e.g. a barrier still on its way) and allocates ids.
"""

from __future__ import annotations

from barrierflow.checkpointing.trigger_rule import TriggerRule

__all__ = ["TriggerStep"]


class TriggerStep:
    """The trigger step of the module docstring, mixed into both coordinators (they set
    :attr:`trigger_rule` and :attr:`trigger_limit`)."""

    trigger_rule: TriggerRule
    #: Stop triggering once this many checkpoints completed or are pending (None: no limit).
    trigger_limit: int | None = None
    #: Whether a forced checkpoint waits until no checkpoint is pending.
    forced_waits_for_pending: bool = False
    #: :meth:`trigger_now` asked for a checkpoint (not triggered yet).
    _forced: bool = False
    #: The id the forced checkpoint got once triggered (None: not yet, or none asked).
    forced_id: int | None = None

    def trigger_now(self) -> None:
        """Trigger one checkpoint at the next tick whatever the interval, ``min_pause``,
        ``max_concurrent`` and ``trigger_limit`` say (a stop with a savepoint). Its id is
        :attr:`forced_id` once triggered."""
        self._forced, self.forced_id = True, None

    def trigger_due(self, now: float, *, pending: int, done: int) -> bool:
        """Whether to trigger a checkpoint at ``now`` with ``pending`` pending and ``done``
        completed in this run: the forced one (unless it waits for ``pending``), else the rule."""
        if self._forced:
            return not (self.forced_waits_for_pending and pending)
        return self.trigger_rule.due(now, pending=pending, done=done, limit=self.trigger_limit)

    def mark_triggered(self, checkpoint_id: int, now: float) -> None:
        """Checkpoint ``checkpoint_id`` was triggered at ``now`` (the forced one, if asked)."""
        if self._forced:
            self._forced, self.forced_id = False, checkpoint_id
        self.trigger_rule.triggered(now)
