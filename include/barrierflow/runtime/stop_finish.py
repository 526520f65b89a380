"""The run's side of a stop (``barrierflow stop SPEC [--savepoint]``), once a stop request ended the run.

:func:`barrierflow.ops.stop.stop` writes a stop request (:mod:`barrierflow.runtime.stop_request`)
and waits for the outcome; the run that took the request up ends (every stage stopped, its sinks
committed the last cut), then :func:`finish_stop` makes the savepoint, and :func:`record_outcome`
records the outcome for ``stop`` to read once the run's lease is released.
"""

from __future__ import annotations

import logging

from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.pipeline.words import words
from barrierflow.retention.savepoint import promote_cut
from barrierflow.runtime.stop_request import StopOutcome, StopRequest, write_outcome

log = logging.getLogger(__name__)

__all__ = ["finish_stop", "record_outcome", "savepoint_location"]


def savepoint_location(pipeline: OpenedPipeline, checkpoint_id: int) -> str:
    """Where cut ``checkpoint_id`` lives (:meth:`OpenedPipeline.cut_location`)."""
    return pipeline.cut_location(checkpoint_id)


def finish_stop(pipeline: OpenedPipeline, request: StopRequest, savepoint_id: int | None) -> StopOutcome:
    """The run's side once a stop request ended it and every stage stopped (its sinks
    committed the last cut), under the lease: with ``savepoint_id`` make that cut a savepoint
    in every stage (:func:`barrierflow.retention.savepoint.promote_cut`, which verifies it first).
    Returns the ``stopped`` outcome, which the caller records once the lease is released."""
    if savepoint_id is not None:
        promoted = promote_cut(open_pipeline(pipeline.spec_path), savepoint_id)
        return StopOutcome(request.id, request.fence, "stopped", promoted,
                           savepoint_location(pipeline, promoted), promoted,
                           noun=words(pipeline).cut_noun,
                           message=f"stopped with savepoint {promoted}")
    newest = pipeline.newest_cut()
    latest = newest.checkpoint_id if newest is not None else None
    where = f"the latest completed {words(pipeline).cut_noun} is {latest}" if latest is not None else \
        f"no {words(pipeline).cut_noun} completed yet"
    return StopOutcome(request.id, request.fence, "stopped", None, None, latest, noun=words(pipeline).cut_noun,
                       message=f"stopped without a savepoint; {where}")


def record_outcome(pipeline: OpenedPipeline, outcome: StopOutcome) -> None:
    """Record ``outcome`` for ``stop`` to read (a store outage is logged: ``stop`` then reports
    that the run ended without completing the stop)."""
    try:
        write_outcome(pipeline.objects, outcome)
    except Exception as exc:
        log.error("pipeline %s: could not record the stop's outcome (%s): %s", pipeline.name, outcome.message, exc)
