"""A checkpoint store with controlled event times, offsets and completion times: real
checkpoints from :class:`CheckpointFactory` (no Spark) whose manifests are then rewritten
through the Manifest model, so skew and lag are known exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import manifest_key

from tests.verification.checkpoint_factory import CheckpointFactory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def completion(cid: int) -> datetime:
    return T0 + timedelta(seconds=10 * cid)


def rewrite(factory: CheckpointFactory, manifest: Manifest, offsets: dict[str, int],
            times: dict[str, datetime | None], completed: datetime) -> Manifest:
    """Store ``manifest`` again with source ``events`` at ``offsets``/``times``, completed at ``completed``."""
    changed = manifest.model_copy(update={
        "barrier_offsets": {"events": offsets}, "max_event_time": {"events": times}, "completion_time": completed})
    key = manifest_key(changed.checkpoint_id)  # a deliberate rewrite: the store itself never overwrites
    factory.store.objects.put_bytes(key, changed.model_dump_json(indent=2).encode())
    return changed


def healthy_store(tmp_path: Path, count: int = 4, *, skewed: dict[int, float] | None = None) -> CheckpointFactory:
    """``count`` checkpoints; at checkpoint c (completed at T0 + 10c s):

    * ``events/0``: offset 10c, event time completion - 2 s (lag 2 s)
    * ``events/1``: offset 10c, event time completion - 5 s (lag 5 s), or completion - ``skewed[c]`` s
    * ``events/2``: offset 7 (never advances: idle), event time unknown

    so the skew is 3 s (or ``skewed[c] - 2`` s) and the max lag 5 s (or ``skewed[c]``)."""
    factory = CheckpointFactory(tmp_path)
    for manifest in factory.take(count):
        c = manifest.checkpoint_id
        done = completion(c)
        lag1 = (skewed or {}).get(c, 5.0)
        rewrite(factory, manifest, {"0": 10 * c, "1": 10 * c, "2": 7},
                {"0": done - timedelta(seconds=2), "1": done - timedelta(seconds=lag1), "2": None}, done)
    return factory
