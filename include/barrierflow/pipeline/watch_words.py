"""How a watcher names what it saw of a pipeline: its lease's heartbeat and its newest completed
cut, in the words the launch watches (client and cluster deploy mode) put in their verdicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def heartbeat_phrase(lease: dict[str, Any] | None) -> str:
    """``lease`` (:func:`barrierflow.lease.lease_state`; None: never leased) for an operator: who
    holds it and whether its heartbeat is alive, stale, released or its holder gone."""
    if lease is None:
        return "the pipeline never held its lease"
    who = f"pid {lease.get('pid')} on {lease.get('host')}, fence {lease.get('fence')}"
    if lease.get("released"):
        return f"its lease was released ({who})"
    if lease.get("process_gone"):
        return f"its lease holder is gone ({who})"
    state = "alive" if lease.get("live") else "stale"
    return (f"its lease heartbeat is {state}: last at {lease.get('heartbeat_at')}, "
            f"{float(lease['heartbeat_age']):.0f} s ago ({who})")


def newest_cut_phrase(noun: str, checkpoint_id: int | None, completed_at: datetime | None, now: datetime) -> str:
    """The newest completed cut (``noun``: ``checkpoint`` / ``global checkpoint``) and its age at ``now``."""
    if checkpoint_id is None or completed_at is None:
        return f"no completed {noun} at all"
    age = max(0.0, (now - completed_at).total_seconds())
    return f"newest completed {noun} {checkpoint_id} at {completed_at.astimezone(UTC).isoformat()}, {age:.0f} s ago"
