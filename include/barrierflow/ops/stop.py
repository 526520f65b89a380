"""Stop a running pipeline (``barrierflow stop SPEC [--savepoint]``), whatever its shape.

:func:`stop` finds the run that holds the pipeline's lease (:mod:`barrierflow.lease`), writes
a stop request for it into the checkpoint store (:mod:`barrierflow.runtime.stop_request`: any
host that sees the store reaches the driver, as the lease does) and waits for the run's
outcome. The run's side is :meth:`barrierflow.runtime.pipeline_runner.PipelineRunner.run`
(step 4) and :func:`barrierflow.ops.run.run`, which marks the savepoint and records the outcome
once the lease is released (:mod:`barrierflow.runtime.stop_finish`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.global_manifest import stage_prefix
from barrierflow.checkpointing.store import manifest_key
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.lease import lease_holder
from barrierflow.pipeline.model import OpenedPipeline, open_pipeline
from barrierflow.runtime.stop_request import (
    StopOutcome,
    StopRequest,
    read_outcome,
    withdraw_request,
    write_request,
)

log = logging.getLogger(__name__)

__all__ = ["NothingToStopError", "StopFailedError", "StopOutcome", "StopResult", "StopTimeoutError",
           "stop"]

#: How often ``stop`` reads the run's outcome and lease (seconds).
WAIT_SECONDS = 0.2
#: How long ``stop`` waits for the outcome of a run whose lease it saw released (a run that
#: fails while stopping records its failure after its lease is released).
OUTCOME_GRACE_SECONDS = 10.0


class NothingToStopError(UserInputError):
    """No run of the pipeline holds its lease (exit 2)."""


class StopFailedError(BarrierflowError):
    """The run did not complete the stop: its savepoint failed, a sink could not commit it,
    or the run ended otherwise (the message says which, and whether it keeps running)."""


class StopTimeoutError(BarrierflowError):
    """The stop did not complete within the time ``stop`` was given."""


@dataclass(frozen=True)
class StopResult:
    """A completed stop: the run's outcome (``savepoint`` and ``location`` with a savepoint;
    ``latest`` the latest completed cut) and whom it stopped."""

    pipeline: str
    outcome: StopOutcome
    holder: str
    waited_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``stop --json``: ``pipeline``, ``stopped`` (whom) and the run's outcome
        (``status``, ``savepoint`` and ``location`` with a savepoint, ``latest``, ``noun``, ``message``)."""
        return {"pipeline": self.pipeline, "stopped": self.holder, **self.outcome.as_dict()}


def stage_locations(pipeline: OpenedPipeline, checkpoint_id: int) -> dict[str, str]:
    """Each stage's manifest of cut ``checkpoint_id`` (several stages)."""
    return {s.name: pipeline.objects.describe(stage_prefix(s.name) + manifest_key(checkpoint_id))
            for s in pipeline.stages}


def _holder(pipeline: OpenedPipeline) -> dict[str, object]:
    holder = lease_holder(Path(pipeline.work_dir), pipeline.objects)
    if holder is None:
        raise NothingToStopError(
            f"pipeline {pipeline.name} is not running: no live lease in {pipeline.objects.describe('_lease/')} "
            f"(nor {Path(pipeline.work_dir) / 'job.lease'}); nothing to stop")
    purpose = holder.get("purpose", "run")
    if purpose != "run":
        raise NothingToStopError(f"pipeline {pipeline.name} is not running: its lease is held for a {purpose} "
                                 f"(pid {holder.get('pid')} on {holder.get('host')}); wait for it to finish")
    if "fence" not in holder:
        raise NothingToStopError(f"pipeline {pipeline.name} is run by pid {holder.get('pid')} on {holder.get('host')} "
                                 "without a lease in its checkpoint store (an old release); stop it with SIGTERM")
    return holder


def stop(spec_path: str | os.PathLike[str], *, savepoint: bool = False, timeout: float = 600.0) -> StopResult:
    """Ask the running pipeline to stop and wait up to ``timeout`` seconds for it.

    With ``savepoint`` the run triggers one more cut at once, waits until it completed and
    every sink committed it, makes it a savepoint, stops every stage and releases the lease;
    without, it triggers no new cut and stops once the pending ones ended (``latest`` names the
    latest completed cut, where the next run starts).

    Raises:
        NothingToStopError: no run holds the lease (exit 2).
        StopFailedError: the savepoint failed (the pipeline keeps running), a sink could not
            commit it (the run failed: the message names the sink and epoch), or the run ended
            without recording the stop.
        StopTimeoutError: not done in time; the message says whether the run took the request
            up (it goes on stopping) or not (the request is withdrawn; the pipeline keeps running).
    """
    if timeout <= 0:
        raise UserInputError("--timeout must be a positive duration, e.g. 10m")
    pipeline = open_pipeline(spec_path)
    holder = _holder(pipeline)
    fence = int(str(holder["fence"]))
    who = f"pid {holder.get('pid')} on {holder.get('host')} (fence {fence})"
    request = StopRequest.new(fence, savepoint=savepoint)
    objects = pipeline.objects
    write_request(objects, request)
    log.info("pipeline %s: stop requested of %s", pipeline.name, who)
    started = time.monotonic()
    deadline = started + timeout
    gone: float | None = None  # when the run's lease was first seen released
    while True:
        outcome = read_outcome(objects, fence)
        mine = outcome if outcome is not None and outcome.request == request.id else None
        live = lease_holder(Path(pipeline.work_dir), objects)
        released = live is None or live.get("fence") != fence
        if mine is not None and mine.status == "stopped" and released:
            return StopResult(pipeline.name, mine, who, time.monotonic() - started)
        if mine is not None and mine.status == "failed":
            raise StopFailedError(f"pipeline {pipeline.name}: the stop did not complete: {mine.message}")
        if released and (mine is None or mine.status == "stopping"):
            gone = gone if gone is not None else time.monotonic()
            if time.monotonic() - gone > OUTCOME_GRACE_SECONDS:  # a failing run records its outcome after release
                raise StopFailedError(
                    f"pipeline {pipeline.name}: the run ({who}) ended without completing the stop (it stopped on its "
                    "own or failed: see its log); nothing is running now")
        if time.monotonic() >= deadline:
            if mine is not None and mine.status == "stopped":
                raise StopTimeoutError(
                    f"pipeline {pipeline.name}: the run ({who}) stopped ({mine.message}) but had not released its "
                    f"lease within {timeout:g} s; it is released when the driver exits (or after the lease TTL)")
            if mine is None:
                withdraw_request(objects, fence)
                late = read_outcome(objects, fence)
                if late is None or late.request != request.id:
                    raise StopTimeoutError(
                        f"pipeline {pipeline.name}: the run ({who}) did not take the stop request up within "
                        f"{timeout:g} s (is its driver stalled?); the request was withdrawn and the pipeline keeps "
                        "running")
                mine = late
            raise StopTimeoutError(
                f"pipeline {pipeline.name}: the stop did not complete within {timeout:g} s; the run ({who}) took it "
                f"up and goes on stopping ({mine.message}). Run 'barrierflow stop {spec_path}"
                f"{' --savepoint' if savepoint else ''}' again to wait for it")
        time.sleep(WAIT_SECONDS)
