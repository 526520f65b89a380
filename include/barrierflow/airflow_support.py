"""What the Airflow DAGs in ``dags/`` need from the library, kept free of Airflow imports.

* :func:`discover_specs` and :func:`discover_pipelines` find the pipeline specs a DAG file
  turns into DAGs. They read only the spec files (no database, no connection, no Spark), so
  they are safe at DAG-parse time; a spec that fails to load is returned with its error
  instead of raising, so one bad file never hides the other pipelines.
* :func:`dag_id_for` is the one place DAG ids are spelled: ``barrierflow_<kind>__<name>``.
* :func:`check_checkpoint_freshness` is the supervision check: the pipeline's latest
  *completed* checkpoint (one with a manifest) must exist and be younger than a limit. A
  running job completes a checkpoint every ``checkpoint.interval``; when none completed for
  several intervals the job is dead, stuck, or cannot reach its checkpoint store.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.errors import CheckpointError, SpecError

if TYPE_CHECKING:
    from barrierflow.spec.models import PipelineSpec

log = logging.getLogger(__name__)

#: The kinds of DAG made per pipeline: the triggered, long-running job and its scheduled check.
DAG_KINDS = ("pipeline", "supervise")

_DAG_ID_PART = re.compile(r"[^A-Za-z0-9_.-]+")


class CheckpointStaleError(CheckpointError):
    """A pipeline has no completed checkpoint, or its latest one is older than allowed.

    Attributes:
        pipeline: the pipeline's name.
        age_seconds: age of the latest completed checkpoint; ``None`` when there is none.
        max_age_seconds: the limit it was checked against.
    """

    def __init__(self, pipeline: str, age_seconds: float | None, max_age_seconds: float, detail: str) -> None:
        self.pipeline = pipeline
        self.age_seconds = age_seconds
        self.max_age_seconds = max_age_seconds
        super().__init__(detail)


@dataclass(frozen=True)
class DiscoveredPipeline:
    """One spec file found by :func:`discover_pipelines`.

    Exactly one of ``spec`` and ``error`` is set. ``name`` is the spec's ``name`` when it
    loaded, else a DAG-id-safe form of the file name, so the broken file still gets a DAG.
    """

    path: Path
    name: str
    spec: PipelineSpec | None = None
    error: str | None = None


def discover_specs(folder: str | os.PathLike[str]) -> list[Path]:
    """The pipeline spec files (``*.yaml``, not hidden) directly in ``folder``, sorted by name.

    A missing folder yields an empty list (logged), not an error.
    """
    directory = Path(folder)
    if not directory.is_dir():
        log.warning("pipeline spec folder %s does not exist; no pipelines discovered", directory)
        return []
    return sorted(
        path for path in directory.glob("*.yaml") if path.is_file() and not path.name.startswith(".")
    )


def dag_id_for(spec_name: str, kind: str) -> str:
    """The DAG id of pipeline ``spec_name`` for ``kind`` (``"pipeline"`` or ``"supervise"``)."""
    if kind not in DAG_KINDS:
        raise ValueError(f"unknown DAG kind {kind!r}; expected one of {', '.join(DAG_KINDS)}")
    if not spec_name:
        raise ValueError("a pipeline name is needed to build a DAG id")
    return f"barrierflow_{kind}__{spec_name}"


def _name_from_file(path: Path) -> str:
    return _DAG_ID_PART.sub("_", path.stem) or "unnamed"


def discover_pipelines(folder: str | os.PathLike[str]) -> list[DiscoveredPipeline]:
    """Load every spec in ``folder``; never raises for a bad spec.

    A spec that fails to load, or whose ``name`` another file in the folder already uses,
    comes back with ``error`` set (the :class:`SpecError` message) so the caller can show it;
    of several valid specs with one name, the first file in name order keeps it.
    Names are unique in the result: a broken file whose name collides gets a suffix.
    """
    from barrierflow.spec.loader import load_spec

    loaded: list[DiscoveredPipeline] = []
    for path in discover_specs(folder):
        try:
            spec = load_spec(path)
        except SpecError as exc:
            log.error("pipeline spec %s is invalid, its DAG will only report the error: %s", path, exc)
            loaded.append(DiscoveredPipeline(path=path, name=_name_from_file(path), error=str(exc)))
            continue
        loaded.append(DiscoveredPipeline(path=path, name=spec.name, spec=spec))

    result: list[DiscoveredPipeline] = []
    owner: dict[str, Path] = {}
    for entry in [e for e in loaded if e.spec is not None] + [e for e in loaded if e.spec is None]:
        if entry.spec is not None and entry.name in owner:
            message = str(SpecError(str(entry.path), [(
                "name", f"pipeline name {entry.name!r} is already used by {owner[entry.name]}; "
                        "every spec in the folder needs its own name")]))
            log.error("%s", message)
            entry = DiscoveredPipeline(path=entry.path, name=_name_from_file(entry.path), error=message)
        name = entry.name
        suffix = 2
        while name in owner:
            name = f"{entry.name}__{suffix}"
            suffix += 1
        owner[name] = entry.path
        result.append(entry if name == entry.name else DiscoveredPipeline(
            path=entry.path, name=name, spec=entry.spec, error=entry.error))
    return sorted(result, key=lambda e: e.path)


def latest_completed_checkpoint_time(spec: PipelineSpec) -> datetime | None:
    """Completion time of the newest completed checkpoint in the spec's checkpoint store."""
    from barrierflow.checkpointing.store import CheckpointStore

    completed = CheckpointStore.for_spec(spec).completed()
    return completed[-1].completion_time if completed else None


def check_checkpoint_freshness(
    spec_path: str | os.PathLike[str],
    max_age_seconds: float,
    now: datetime | None = None,
    latest_completion: Callable[[PipelineSpec], datetime | None] | None = None,
) -> str:
    """Check that the pipeline at ``spec_path`` completed a checkpoint recently.

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
    from barrierflow.spec.loader import load_spec

    if max_age_seconds <= 0:
        raise ValueError(f"max_age_seconds must be greater than 0, got {max_age_seconds}")
    current = datetime.now(UTC) if now is None else now
    if current.tzinfo is None:
        raise ValueError("now must be timezone-aware (e.g. datetime.now(UTC))")
    spec = load_spec(spec_path)
    lookup = latest_completion or latest_completed_checkpoint_time
    completed_at = lookup(spec)
    storage = spec.checkpoint.storage
    if completed_at is None:
        raise CheckpointStaleError(
            spec.name, None, max_age_seconds,
            f"pipeline {spec.name!r} has no completed checkpoint in {storage}: the job never "
            f"completed one (not started, failing, or unable to write to the store). Check the "
            f"job's log, then the store.",
        )
    if completed_at.tzinfo is None:
        raise ValueError(f"checkpoint completion time {completed_at!r} is naive; expected timezone-aware")
    age = max(0.0, (current - completed_at).total_seconds())
    if age > max_age_seconds:
        raise CheckpointStaleError(
            spec.name, age, max_age_seconds,
            f"pipeline {spec.name!r}: latest completed checkpoint in {storage} finished "
            f"{age:.1f}s ago at {completed_at.astimezone(UTC).isoformat()}, older than the limit of "
            f"{max_age_seconds:g}s (checkpoint interval {spec.checkpoint.interval:g}s): the job is "
            f"dead, stuck, or cannot complete checkpoints.",
        )
    return (
        f"pipeline {spec.name!r}: latest completed checkpoint finished {age:.1f}s ago "
        f"(limit {max_age_seconds:g}s, interval {spec.checkpoint.interval:g}s)"
    )
