"""Is a pipeline whose driver a cluster manager hosts still fine? What the cluster-mode launch's
trigger asks while it waits.

:func:`observe_cluster` asks the cluster manager for the application's state
(:func:`barrierflow.spark.cluster_apps.fetch_status`) and reads the pipeline's lease and newest
completed cut from its checkpoint store. :func:`decide_cluster` turns that into a verdict, pure,
with the time given (``outcome`` and a message for the operator, as the client-mode watch's):

* **finished**: the cluster manager says the driver ended successfully (pod ``Succeeded``, YARN
  ``FINISHED``/``SUCCEEDED``): the job ended as asked (a bounded run, or a stop).
* **failed**: the cluster manager says it failed or was killed (its own words: the pod's reason
  and container exit code, YARN's diagnostics); or the application is missing ``lost_after``
  seconds after the submit (deleted, evicted and removed, never created).
* **stalled**: the driver has not started (``pending``) for ``stall_after`` seconds since the
  submit (no resources, an image that cannot be pulled), or it runs but no cut completed for
  ``stall_after`` seconds, counted from the later of the submit and the newest completed cut.
  The message names the newest cut and the lease's heartbeat.
* **running**: anything else.

The cluster manager's state decides the end; the lease and the checkpoints only say whether a
running driver makes progress. A look that cannot ask the cluster manager raises
:class:`~barrierflow.spark.cluster_apps.ClusterAppError`: the caller looks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from barrierflow.lease import lease_state
from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.watch_words import heartbeat_phrase, newest_cut_phrase
from barrierflow.pipeline.words import words
from barrierflow.spark.cluster_apps import AppStatus, ClusterApp, fetch_status


@dataclass(frozen=True)
class ClusterObservation:
    """One look at a cluster-hosted pipeline at ``now``; ``submitted_at`` is when spark-submit
    handed the application over."""

    now: datetime
    app: ClusterApp
    pipeline: str
    submitted_at: datetime
    status: AppStatus
    #: :func:`barrierflow.lease.lease_state` of the store (None: never leased).
    lease: dict[str, Any] | None
    checkpoint_id: int | None
    checkpoint_at: datetime | None
    noun: str = "checkpoint"


def observe_cluster(app: ClusterApp, spec_path: str, submitted_at: datetime, *, now: datetime | None = None,
                    token_file: str | None = None, ca_file: str | None = None) -> ClusterObservation:
    """Look at ``app`` and its pipeline (blocking I/O: an HTTP request, the store is listed).

    Raises:
        ClusterAppError: the cluster manager could not be asked.
    """
    status = fetch_status(app, token_file=token_file, ca_file=ca_file)
    current = now or datetime.now(UTC)
    pipeline = open_pipeline(spec_path)
    newest = pipeline.newest_cut()
    return ClusterObservation(current, app, pipeline.spec.name, submitted_at, status,
                              lease_state(pipeline.objects, current),
                              newest.checkpoint_id if newest is not None else None,
                              newest.completion_time if newest is not None else None, words(pipeline).cut_noun)


def _age(obs: ClusterObservation, at: datetime) -> float:
    return max(0.0, (obs.now - at).total_seconds())


def _heartbeat(obs: ClusterObservation) -> str:
    return heartbeat_phrase(obs.lease)


def _newest(obs: ClusterObservation) -> str:
    return newest_cut_phrase(obs.noun, obs.checkpoint_id, obs.checkpoint_at, obs.now)


def decide_cluster(obs: ClusterObservation, *, stall_after: float, lost_after: float) -> dict[str, str]:
    """The verdict on ``obs`` (see the module docstring) as ``{"outcome", "message"}``;
    ``stall_after`` and ``lost_after`` in seconds."""
    name, where, status = obs.pipeline, obs.app.describe(), obs.status
    if status.state == "succeeded":
        return {"outcome": "finished", "message": f"pipeline {name}: the driver ended successfully ({status.detail}; "
                                                  f"{where}); {_newest(obs)}"}
    if status.state == "failed":
        return {"outcome": "failed", "message": (
            f"pipeline {name} failed: the cluster manager reports {status.detail} ({where}); {_heartbeat(obs)}; "
            f"{_newest(obs)}. Read the driver's log there, then bring it back from its latest checkpoint with its "
            "recovery DAG")}
    since_submit = _age(obs, obs.submitted_at)
    if status.state == "missing":
        if since_submit > lost_after:
            return {"outcome": "failed", "message": (
                f"pipeline {name} failed: the cluster manager has no {where} {since_submit:.0f} s after the submit "
                f"(limit {lost_after:g} s): deleted, evicted and removed, or never created; {_heartbeat(obs)}; "
                f"{_newest(obs)}. Bring it back from its latest checkpoint with its recovery DAG")}
        return {"outcome": "running", "message": f"pipeline {name}: submitted {since_submit:.0f} s ago, not yet seen"}
    if status.state == "pending":
        if since_submit > stall_after:
            return {"outcome": "stalled", "message": (
                f"pipeline {name} stalled: its driver has not started {since_submit:.0f} s after the submit (limit "
                f"stall_after_seconds={stall_after:g}): {status.detail} ({where}); look for missing resources or an "
                "image that cannot be pulled")}
        return {"outcome": "running", "message": f"pipeline {name}: the driver is starting ({status.detail})"}
    progress = obs.submitted_at if obs.checkpoint_at is None else max(obs.submitted_at, obs.checkpoint_at)
    if _age(obs, progress) > stall_after:
        return {"outcome": "stalled", "message": (
            f"pipeline {name} stalled: no {obs.noun} completed for {_age(obs, progress):.0f} s (limit "
            f"stall_after_seconds={stall_after:g}) while the driver runs ({status.detail}; {where}): {_newest(obs)}; "
            f"{_heartbeat(obs)}. Read the driver's log; stop it and bring it back with the recovery DAG if it does "
            "not resume")}
    return {"outcome": "running", "message": f"pipeline {name}: {_newest(obs)}; {_heartbeat(obs)}"}
