"""The supervision check: the pipeline's latest *completed* cut (a checkpoint with a manifest;
several stages: a global checkpoint, written once every stage's snapshot is in) must exist and
be younger than a limit. A running job completes one every ``checkpoint.interval``; when none
completed for several intervals the job is dead, stuck, or cannot reach its checkpoint store."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from barrierflow.airflow.errors import CheckpointStaleError
from barrierflow.pipeline.words import words

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec


def check_checkpoint_freshness(
    spec_path: str | os.PathLike[str],
    max_age_seconds: float,
    now: datetime | None = None,
    latest_completion: Callable[[PipelineSpec], datetime | None] | None = None,
) -> str:
    """Check that the pipeline at ``spec_path`` completed a checkpoint recently (a multi-stage
    pipeline: a global checkpoint, whose manifest is written once every stage's snapshot is in).

    Args:
        spec_path: the pipeline spec file.
        max_age_seconds: the oldest acceptable latest completed checkpoint (> 0).
        now: the current time (timezone-aware); defaults to the current UTC time.
        latest_completion: returns the completion time of the newest completed checkpoint,
            or ``None`` if there is none; defaults to reading the spec's checkpoint store.

    Returns:
        A one-line status naming the pipeline, the checkpoint's age and the limit.

    Raises:
        SpecError: the spec does not load.
        CheckpointStaleError: there is no completed checkpoint, or the latest is too old.
        ValueError: ``max_age_seconds`` is not positive, or a datetime is naive.
    """
    from barrierflow.ops.progress import newest_completion_time, open_pipeline

    if max_age_seconds <= 0:
        raise ValueError(f"max_age_seconds must be greater than 0, got {max_age_seconds}")
    current = datetime.now(UTC) if now is None else now
    if current.tzinfo is None:
        raise ValueError("now must be timezone-aware (e.g. datetime.now(UTC))")
    pipeline = open_pipeline(spec_path)
    spec, what = pipeline.spec, words(pipeline).cut_noun
    completed_at = latest_completion(spec) if latest_completion is not None else newest_completion_time(pipeline)
    storage = spec.checkpoint.storage
    if completed_at is None:
        raise CheckpointStaleError(
            spec.name, None, max_age_seconds,
            f"pipeline {spec.name!r} has no completed {what} in {storage}: the job never "
            f"completed one (not started, failing, or unable to write to the store). Check the "
            f"job's log, then the store.",
        )
    if completed_at.tzinfo is None:
        raise ValueError(f"checkpoint completion time {completed_at!r} is naive; expected timezone-aware")
    age = max(0.0, (current - completed_at).total_seconds())
    if age > max_age_seconds:
        raise CheckpointStaleError(
            spec.name, age, max_age_seconds,
            f"pipeline {spec.name!r}: latest completed {what} in {storage} finished "
            f"{age:.1f}s ago at {completed_at.astimezone(UTC).isoformat()}, older than the limit of "
            f"{max_age_seconds:g}s (checkpoint interval {spec.checkpoint.interval:g}s): the job is "
            f"dead, stuck, or cannot complete checkpoints.",
        )
    return (
        f"pipeline {spec.name!r}: latest completed {what} finished {age:.1f}s ago "
        f"(limit {max_age_seconds:g}s, interval {spec.checkpoint.interval:g}s)"
    )
