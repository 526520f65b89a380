"""Upload reservations and retention runs: nothing an in-flight checkpoint uses is ever deleted.

(Named for what it holds. "Fence" in barrierflow means one thing only: the lease's fencing
number, :mod:`barrierflow.lease`.)

Two small documents in the checkpoint store carry the protocol:

``_inflight/chk-<n>.json`` — a *reservation* (format ``barrierflow-inflight``, version 1)::

    {"format": "barrierflow-inflight", "format_version": 1, "pipeline": "demo",
     "checkpoint_id": 7, "created_at": "2026-01-01T00:00:00+00:00",
     "digests": ["<sha256>", ...]}        # EVERY shared file checkpoint n will reference

``_retention/running.json`` / ``_retention/last.json`` — a *retention run* (format
``barrierflow-retention-run``, version 1): ``{"run_id", "started_at", "finished_at"}``;
``running.json`` exists while a run may delete, ``last.json`` names the last finished run.

Protocol (a Dekker-style handshake over a strongly consistent store: local files, S3)::

    uploader (async phase of checkpoint n)        retention run R
    U1. hash the snapshot's files                 R1. write _retention/running.json
    U2. write _inflight/chk-<n>.json (all)        R2. read every reservation, list manifests
    U3. read _retention/: wait while running.json R3. delete what neither a kept manifest
        exists; if last.json names a run not          nor a reservation references
        seen before, re-list shared/              R4. write last.json, delete running.json
    U4. upload every digest not in shared/
    U5. manifest written -> delete the reservation (coordinator)

Why it is safe: take a shared file X that n references and R deletes. R did not see n's
reservation, so R2 preceded U2, so R1 preceded U3. At U3 either running.json is still there
(n waits until R4) or R4 already happened; in both cases U3 ends after R3 and sees a
``last.json`` it has not seen, re-lists ``shared/`` and uploads X again in U4. A run that
starts after U2 sees the reservation and keeps X. Reservations are removed when the manifest
is written or the checkpoint failed; retention also drops reservations of checkpoints that
have a manifest or failure record, or that are older than ``checkpoint.timeout`` (such a
checkpoint has expired and can never complete). A ``running.json`` older than
:data:`STALE_RUN_SECONDS` belongs to a crashed run and is ignored.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from barrierflow.processes import process_alive
from barrierflow.storage import ObjectNotFoundError, ObjectStore

log = logging.getLogger(__name__)

INFLIGHT_PREFIX = "_inflight/"
RUNNING_KEY = "_retention/running.json"
LAST_KEY = "_retention/last.json"
STALE_RUN_SECONDS = 600.0


def reservation_key(checkpoint_id: int) -> str:
    return f"{INFLIGHT_PREFIX}chk-{checkpoint_id}.json"


class Reservation(BaseModel):
    """The shared files an in-flight checkpoint references (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["barrierflow-inflight"] = "barrierflow-inflight"
    format_version: Literal[1] = 1
    pipeline: str
    checkpoint_id: int
    created_at: AwareDatetime
    digests: list[str]


class RetentionRun(BaseModel):
    """One retention run, as recorded in ``_retention/running.json`` and ``last.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["barrierflow-retention-run"] = "barrierflow-retention-run"
    format_version: Literal[1] = 1
    run_id: str
    started_at: AwareDatetime
    finished_at: AwareDatetime | None = None


def reserve(objects: ObjectStore, pipeline: str, checkpoint_id: int, digests: Iterable[str],
            now: datetime | None = None) -> Reservation:
    """Step U2: record every digest checkpoint ``checkpoint_id`` will reference."""
    reservation = Reservation(pipeline=pipeline, checkpoint_id=checkpoint_id,
                              created_at=now or datetime.now(UTC), digests=sorted(set(digests)))
    objects.put_bytes(reservation_key(checkpoint_id), reservation.model_dump_json().encode())
    return reservation


def release(objects: ObjectStore, checkpoint_id: int) -> None:
    """Step U5: the checkpoint completed or failed; its reservation is no longer needed."""
    try:
        objects.delete(reservation_key(checkpoint_id))
    except Exception as exc:  # best effort: retention drops it later
        log.warning("could not delete the reservation of checkpoint %d: %s", checkpoint_id, exc)


def reservations(objects: ObjectStore) -> list[Reservation]:
    """Every readable reservation (an unreadable one is being written: ignored, because
    its writer checks for a retention run after writing it: step U3)."""
    out = []
    for info in objects.list(INFLIGHT_PREFIX):
        try:
            out.append(Reservation.model_validate_json(objects.get_bytes(info.key)))
        except (ObjectNotFoundError, ValidationError):
            continue
    return out


def _read_run(objects: ObjectStore, key: str) -> RetentionRun | None:
    try:
        return RetentionRun.model_validate_json(objects.get_bytes(key))
    except (ObjectNotFoundError, ValidationError):
        return None


def begin_run(objects: ObjectStore, now: datetime | None = None, *, run_id: str | None = None) -> RetentionRun:
    """Step R1: announce a retention run before reading reservations (``run_id``: its id,
    unique; default a random one)."""
    run = RetentionRun(run_id=run_id or uuid.uuid4().hex, started_at=now or datetime.now(UTC))
    objects.put_bytes(RUNNING_KEY, run.model_dump_json().encode())
    return run


def announced_run(objects: ObjectStore) -> RetentionRun | None:
    """The retention run ``running.json`` announces (None: none, or unreadable)."""
    return _read_run(objects, RUNNING_KEY)


def end_run(objects: ObjectStore, run: RetentionRun, now: datetime | None = None) -> None:
    """Step R4: record the finished run, then withdraw the announcement."""
    done = run.model_copy(update={"finished_at": now or datetime.now(UTC)})
    objects.put_bytes(LAST_KEY, done.model_dump_json().encode())
    objects.delete(RUNNING_KEY)


class RetentionRunWatch:
    """The uploader's side of the protocol (step U3)."""

    def __init__(self, objects: ObjectStore, *, stale_after: float = STALE_RUN_SECONDS, poll: float = 0.05,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.objects = objects
        self.stale_after = stale_after
        self.poll = poll
        self.now = now
        self._seen: str | None = None

    def wait_out_retention(self) -> bool:
        """Wait while a retention run is in progress; True if a run finished since the last
        call (the first call returns True): the caller must then re-list ``shared/``.

        A run announced by a process of this host that is gone (:func:`owner_gone`: a driver
        killed while its own retention deleted) is ended here at once (:func:`end_run`, so the
        caller re-lists what it may have deleted) instead of being waited out for
        :data:`STALE_RUN_SECONDS`; a stale run of another host is ignored and ``shared/``
        re-listed too."""
        stale = False
        while (running := _read_run(self.objects, RUNNING_KEY)) is not None:
            if owner_gone(running.run_id):
                log.warning("ending retention run %s, whose process is gone", running.run_id)
                end_run(self.objects, running, self.now())
                continue
            age = (self.now() - running.started_at).total_seconds()
            if age > self.stale_after:
                log.warning("ignoring retention run %s started %.0f s ago (crashed?)", running.run_id, age)
                stale = True
                break
            time.sleep(self.poll)
        last = _read_run(self.objects, LAST_KEY)
        last_id = last.run_id if last else ""
        changed = stale or self._seen is None or last_id != self._seen
        self._seen = last_id
        return changed


#: How a retention run of ``barrierflow run`` begins its id: ``run-<host>-<pid>-<random>``.
RUN_OWNER_PREFIX = "run"


def run_owner_id() -> str:
    """A retention run id naming this process as its owner (``run-<host>-<pid>-<random>``),
    which :func:`owner_gone` can tell dead from alive later."""
    return f"{RUN_OWNER_PREFIX}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"


def owner_gone(run_id: str) -> bool:
    """Whether ``run_id`` (made by :func:`run_owner_id`) names a process of this host, other than
    this one, that is gone: its run will delete nothing more. Ids of other hosts or of other
    formats (``retain``'s) are never called gone."""
    head, _, rest = run_id.rpartition("-")  # rest: the random part
    owner, _, pid = head.rpartition("-")
    return (owner == f"{RUN_OWNER_PREFIX}-{socket.gethostname()}" and bool(rest) and pid.isdigit()
            and int(pid) != os.getpid() and not process_alive(int(pid)))
