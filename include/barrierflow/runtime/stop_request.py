"""Asking a running pipeline to stop (``barrierflow stop``), on any host.

The request and its outcome live in the pipeline's checkpoint store, beside its lease
(:mod:`barrierflow.lease`), so a ``stop`` on one host reaches a driver on another exactly as
the lease does; a local ``checkpoint.storage`` must then be a shared file system, as for the
lease. Both are keyed by the fencing number of the run they address, so a request can never
stop a later run, and a later run never reads an earlier run's outcome::

    _stop/request-<F:012d>.json   {"id", "fence", "savepoint", "requested_at", "by"}: written by
                                  ``stop`` (a newer request replaces an older one)
    _stop/outcome-<F:012d>.json   {"request", "fence", "status", "savepoint", "location",
                                  "latest", "noun", "message", "at"}: written by the run F

The run loop (:meth:`barrierflow.runtime.pipeline_runner.PipelineRunner.run`) polls the
request of its own fence every :data:`POLL_SECONDS` (one small read of the store; a tick is
milliseconds) through :class:`StopWatch`. The outcome's ``status`` is, in order:

* ``stopping``: the run took the request up (with a savepoint: the savepoint's cut was
  triggered, ``savepoint`` is its id once known);
* ``stopped``: every stage stopped and the lease was released; with a savepoint, the cut
  completed, every sink committed it and it is a savepoint (``savepoint``, ``location``);
  without, ``latest`` is the latest completed cut;
* ``failed``: the stop did not complete (``message`` says why and whether the pipeline keeps
  running: a savepoint cut that failed leaves it running; a sink that could not commit the
  savepoint fails the run).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from barrierflow.storage import ObjectNotFoundError, ObjectStore

__all__ = ["POLL_SECONDS", "STOP_PREFIX", "StopOutcome", "StopRequest", "StopWatch", "outcome_key", "read_outcome",
           "read_request", "request_key", "withdraw_request", "write_outcome", "write_request"]

STOP_PREFIX = "_stop/"
#: How often the run loop reads its stop request (seconds).
POLL_SECONDS = 0.25

Status = Literal["stopping", "stopped", "failed"]


def request_key(fence: int) -> str:
    return f"{STOP_PREFIX}request-{fence:012d}.json"


def outcome_key(fence: int) -> str:
    return f"{STOP_PREFIX}outcome-{fence:012d}.json"


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class StopRequest:
    """A request to stop run ``fence`` (with ``savepoint``: after one more cut, kept as a savepoint)."""

    id: str
    fence: int
    savepoint: bool
    requested_at: str
    by: str

    @classmethod
    def new(cls, fence: int, *, savepoint: bool) -> StopRequest:
        return cls(uuid.uuid4().hex, fence, savepoint, _now(), f"pid {os.getpid()} on {socket.gethostname()}")


@dataclass(frozen=True)
class StopOutcome:
    """What became of a :class:`StopRequest` (module docstring)."""

    request: str
    fence: int
    status: Status
    savepoint: int | None = None
    location: str | None = None
    latest: int | None = None
    noun: str = "checkpoint"
    message: str = ""
    at: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _get(objects: ObjectStore, key: str) -> dict[str, Any] | None:
    try:
        return dict(json.loads(objects.get_bytes(key)))
    except (ObjectNotFoundError, ValueError):
        return None


def write_request(objects: ObjectStore, request: StopRequest) -> None:
    objects.put_bytes(request_key(request.fence), json.dumps(asdict(request)).encode())


def read_request(objects: ObjectStore, fence: int) -> StopRequest | None:
    """The stop request of run ``fence`` (None: none, or unreadable)."""
    body = _get(objects, request_key(fence))
    if body is None:
        return None
    try:
        return StopRequest(**body)
    except TypeError:
        return None


def withdraw_request(objects: ObjectStore, fence: int) -> None:
    objects.delete(request_key(fence))


def write_outcome(objects: ObjectStore, outcome: StopOutcome) -> None:
    body = {**outcome.as_dict(), "at": outcome.at or _now()}
    objects.put_bytes(outcome_key(outcome.fence), json.dumps(body).encode())


def read_outcome(objects: ObjectStore, fence: int) -> StopOutcome | None:
    body = _get(objects, outcome_key(fence))
    if body is None:
        return None
    try:
        return StopOutcome(**body)
    except TypeError:
        return None


class StopWatch:
    """The run loop's view of its stop request: :meth:`poll` reads it at most every
    :data:`POLL_SECONDS` and returns a request once (a request already taken up is not
    returned again; a newer one, from another ``stop``, is)."""

    def __init__(self, objects: ObjectStore, fence: int, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.objects = objects
        self.fence = fence
        self.poll_seconds = poll_seconds
        self._next = 0.0
        self._seen: set[str] = set()

    def poll(self) -> StopRequest | None:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.poll_seconds
        try:
            request = read_request(self.objects, self.fence)
        except Exception:  # a store outage: the next poll tries again
            return None
        if request is None or request.id in self._seen:
            return None
        self._seen.add(request.id)
        return request

    def report(self, outcome: StopOutcome) -> None:
        """Write ``outcome`` (best effort for ``stopping``; the caller decides for the end)."""
        write_outcome(self.objects, outcome)
