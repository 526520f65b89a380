"""The trigger rule both coordinators share (no Spark, no store)."""

from __future__ import annotations

from barrierflow.checkpointing.trigger_rule import TriggerRule
from barrierflow.spec.models import CheckpointSpec


def _rule(**options: float) -> TriggerRule:
    return TriggerRule(CheckpointSpec(storage="file://unused", **{"interval": 1.0, **options}))


def test_the_first_trigger_comes_an_interval_after_the_start_and_then_every_interval() -> None:
    rule = _rule()
    rule.started(10.0)
    assert not rule.due(10.9, pending=0) and rule.due(11.0, pending=0)
    rule.triggered(11.0)
    assert not rule.due(11.5, pending=0) and rule.due(12.0, pending=0)


def test_min_pause_counts_from_the_end_of_the_last_checkpoint_completed_or_failed() -> None:
    rule = _rule(min_pause=3.0)
    rule.started(0.0)
    rule.triggered(1.0)
    rule.ended(1.5)  # completed or failed: the same
    assert not rule.due(4.4, pending=0) and rule.due(4.5, pending=0)
    rule.started(100.0)  # a new run: no checkpoint of it ended yet
    assert rule.due(101.0, pending=0)


def test_concurrency_and_the_run_s_limit() -> None:
    rule = _rule(max_concurrent=2)
    rule.started(0.0)
    assert rule.due(5.0, pending=1) and not rule.due(5.0, pending=2)
    assert not rule.due(5.0, pending=0, done=3, limit=3) and rule.due(5.0, pending=0, done=2, limit=3)
    assert not rule.due(5.0, pending=1, done=2, limit=3)
