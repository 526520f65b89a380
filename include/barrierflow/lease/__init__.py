"""A pipeline's lease and fencing numbers: one process at a time runs, restores or reconciles
a pipeline, on any host, and a process that lost the lease can no longer change anything.

**Where.** With the checkpoint store given (every production caller), the lease lives in the
store, under ``_lease/``, so drivers and Airflow tasks on different hosts see it::

    _lease/fence-<F:012d>.json       acquisition F (immutable): {"format", "pipeline", "fence",
                                     "token", "pid", "host", "purpose", "started_at", "ttl_seconds"}
    _lease/heartbeat-<F:012d>.json   {"fence", "token", "at"}: rewritten by holder F only
    _lease/released-<F:012d>.json    holder F let go (written by F only)

``<work_dir>/job.lease`` is kept as a same-host mirror of the holder (with its fence) for
readers that know only the work directory. Without a store (legacy callers and tests) the
lease is that file alone, under ``flock``: a lease of this host whose process is gone is
stale, one of another host is taken as live.

**Acquiring (atomic).** Read the highest fence record F. If its holder is live and is not this
process, raise :class:`JobAlreadyRunningError` naming it. Otherwise create
``fence-<F+1>`` with :meth:`~barrierflow.storage.ObjectStore.put_if_absent` (a hard link
locally, ``If-None-Match: *`` on S3, probed once per store: an endpoint that ignores or
rejects it is refused with :class:`~barrierflow.storage.ConditionalWriteUnsupportedError`). Of two
contenders exactly one creates it; the other reads the winner and refuses. The fence number
of every acquisition (run, restore, reconciliation) is therefore higher than any before it;
the records are the counter, so it survives the release of the lease (only records far below
the highest are ever deleted).

**Liveness and takeover.** Holder F is *live* unless ``released-F`` exists, or its last
heartbeat (``heartbeat-F``, else ``started_at``) is older than its own ``ttl_seconds`` (it
heartbeats every third of it; default :data:`DEFAULT_TTL_SECONDS`, ``BARRIERFLOW_LEASE_TTL_SECONDS``),
or it is a process of this host that is gone (a crash is taken over at once). A crashed holder
on another host is thus taken over after at most one TTL. The rule cannot tell a crashed
holder from a live but stalled one (a long GC pause, a suspended VM, SIGSTOP, a partition):
both stop heartbeating, and the stalled one is taken over too. That is safe only because of
fencing: the taker's fence is higher, and the stalled holder, when it wakes, fails its next
fence check instead of acting on a lease it no longer has. (Heartbeat ages compare the
holder's clock with the taker's: hosts' clocks must agree to well within a TTL, as NTP gives;
a skew can only make a takeover early, which fencing again makes safe.)

**Fencing.** :class:`FenceToken` is what a holder carries. :meth:`FenceToken.check` lists
``_lease/fence-`` and raises :class:`FencedOffError` unless the highest record is its own
(same number and token, so a wiped ``_lease/`` does not revive an old holder). Every
externally visible step checks it first: a manifest write (checkpoint completion), a sink's
pre-commit, commit and abort. Writing a micro-batch ahead uses :meth:`FenceToken.check_recent`
(no store request while the heartbeat confirms the lease), since it is on the data path. How
the gap between a check and its write is closed is stated where the writes are:
:mod:`barrierflow.transactions.two_phase` (decision records, write-ahead batches) and
:mod:`barrierflow.checkpointing.store` (manifests).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import BarrierflowError, UserInputError
from barrierflow.processes import process_alive
from barrierflow.storage import ObjectNotFoundError, ObjectStore

log = logging.getLogger(__name__)

Purpose = Literal["run", "restore", "reconcile"]
_WHAT = {"run": "is running", "restore": "is being restored", "reconcile": "is being reconciled"}
_DID = {"run": "taken over to run", "restore": "restored", "reconcile": "reconciled"}
LEASE_PREFIX = "_lease/"
PROBE_KEY = "_lease/probe-conditional-write"
TTL_ENV = "BARRIERFLOW_LEASE_TTL_SECONDS"
DEFAULT_TTL_SECONDS = 30.0
#: Fence, heartbeat and release records this far below the highest fence are deleted.
KEEP_RECORDS = 20
_RECORD = re.compile(r"^_lease/(fence|heartbeat|released)-(\d{12})\.json$")
_probed: set[str] = set()
_probe_lock = threading.Lock()


class JobAlreadyRunningError(UserInputError):
    """Another live process holds the pipeline's lease."""


class FencedOffError(BarrierflowError):
    """This process's lease was taken over (a restore, or a new run after its heartbeat
    expired): a higher fencing number exists, so it must not change anything and stops."""


def fence_key(fence: int) -> str:
    return f"{LEASE_PREFIX}fence-{fence:012d}.json"


def heartbeat_key(fence: int) -> str:
    return f"{LEASE_PREFIX}heartbeat-{fence:012d}.json"


def released_key(fence: int) -> str:
    return f"{LEASE_PREFIX}released-{fence:012d}.json"


def default_ttl() -> float:
    raw = os.environ.get(TTL_ENV, "").strip()
    if not raw:
        return DEFAULT_TTL_SECONDS
    try:
        ttl = float(raw)
    except ValueError:
        raise UserInputError(f"{TTL_ENV}={raw!r} is not a number of seconds (e.g. 30)") from None
    if ttl <= 0:
        raise UserInputError(f"{TTL_ENV}={raw!r} must be positive (seconds, e.g. 30)")
    return ttl


def _read(path: Path) -> dict[str, object] | None:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError):
        return None


def _get_json(objects: ObjectStore, key: str) -> dict[str, Any] | None:
    try:
        return dict(json.loads(objects.get_bytes(key)))
    except (ObjectNotFoundError, ValueError):
        return None


def _records(objects: ObjectStore) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {"fence": set(), "heartbeat": set(), "released": set()}
    for info in objects.list(LEASE_PREFIX):
        match = _RECORD.match(info.key)
        if match:
            found[match.group(1)].add(int(match.group(2)))
    return found


def highest_fence(objects: ObjectStore) -> dict[str, Any] | None:
    """The record of the newest acquisition (the current or last holder), or None."""
    fences = _records(objects)["fence"]
    return _get_json(objects, fence_key(max(fences))) if fences else None


def lease_state(objects: ObjectStore, now: datetime | None = None) -> dict[str, Any] | None:
    """The newest acquisition's record (the current or last holder), or None when there never
    was one, with what a watcher needs to judge it: ``heartbeat_at`` (its last heartbeat, else
    ``started_at``), ``heartbeat_age`` (seconds before ``now``, default the current UTC time),
    ``released``, ``process_gone`` (a process of this host that no longer runs) and ``live``
    (the liveness rule of the module docstring)."""
    records = _records(objects)
    if not records["fence"]:
        return None
    fence = max(records["fence"])
    record = _get_json(objects, fence_key(fence))
    if record is None:
        return None
    record.setdefault("purpose", "run")
    released = fence in records["released"]
    gone = record.get("host") == socket.gethostname() and not process_alive(int(record["pid"]))
    beat = _get_json(objects, heartbeat_key(fence)) if fence in records["heartbeat"] else None
    last = datetime.fromisoformat(str((beat or {}).get("at") or record["started_at"]))
    age = ((now or datetime.now(UTC)) - last).total_seconds()
    stale = age > float(record.get("ttl_seconds", DEFAULT_TTL_SECONDS))
    return {**record, "heartbeat_at": last.isoformat(), "heartbeat_age": age, "released": released,
            "process_gone": gone, "live": not (released or gone or stale)}


def _store_holder(objects: ObjectStore, now: datetime | None = None) -> dict[str, Any] | None:
    """The live holder of the store's lease (the highest fence record, with ``heartbeat_at``),
    or None; see the module docstring for the liveness rule."""
    state = lease_state(objects, now)
    if state is None or not state["live"]:
        return None
    return {k: v for k, v in state.items() if k not in ("heartbeat_age", "released", "process_gone", "live")}


def lease_holder(work_dir: Path, store: ObjectStore | None = None) -> dict[str, object] | None:
    """The live lease (``pid``, ``host``, ``purpose``, ``started_at``; with a store also
    ``fence`` and ``heartbeat_at``), or None. With ``store`` the checkpoint store's lease
    counts (any host); a legacy lease file of this work dir without a fence still counts."""
    local = _read(work_dir / "job.lease")
    if store is not None:
        holder = _store_holder(store)
        if holder is not None:
            return holder
        if local is not None and "fence" in local:
            return None  # the mirror of a store lease that is no longer live
    if local is None:
        return None
    local.setdefault("purpose", "run")
    if local.get("host") != socket.gethostname():
        return local  # cannot check another host's process: assume it is alive
    return local if process_alive(int(local["pid"])) else None  # type: ignore[call-overload]


def job_running(work_dir: Path, store: ObjectStore | None = None) -> bool:
    """Whether any live process holds the lease (a job, a restore or a reconciliation)."""
    return lease_holder(work_dir, store) is not None


def describe(lease: dict[str, object]) -> str:
    fence = f", fence {lease['fence']}" if "fence" in lease else ""
    return f"pid {lease.get('pid')} on {lease.get('host')}, since {lease.get('started_at')}{fence}"


class FenceToken:
    """A holder's fencing number on a checkpoint store; :meth:`check` before every write that
    must not happen once the lease was taken over. ``attempt`` is filled in by the job (for
    messages)."""

    def __init__(self, objects: ObjectStore, pipeline: str, fence: int, token: str, purpose: str) -> None:
        self.objects = objects
        self.pipeline = pipeline
        self.fence = fence
        self.token = token
        self.purpose = purpose
        self.attempt: int | None = None
        #: Kept by the holder's heartbeat (monotonic seconds), for :meth:`check_recent`.
        self.period: float | None = None
        self.confirmed_at = time.monotonic()
        self.beat_started: float | None = None
        self.beat_failed = False
        self.lost: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"FenceToken({self.pipeline!r}, fence={self.fence})"

    def check_recent(self, action: str) -> None:
        """The check for the data path (writing a micro-batch ahead): no store request while the
        heartbeat confirms the lease on schedule, or while the store is unreachable (a heartbeat
        failed or hangs; writes made then are caught by the fence recorded with them); a full
        :meth:`check` when the confirmation is overdue otherwise (the process was stalled: a
        takeover may have happened meanwhile). Raises :class:`FencedOffError` once the heartbeat
        saw a newer holder."""
        if self.lost is not None:
            raise self.fenced_off(action, self.lost or None)
        if self.period is None:
            self.check(action)
            return
        now = time.monotonic()
        hanging = self.beat_started is not None and now - self.beat_started > 1.0
        if now - self.confirmed_at <= 1.5 * self.period or self.beat_failed or hanging:
            return
        self.check(action)
        self.confirmed_at = time.monotonic()

    def check(self, action: str) -> None:
        """Raise :class:`FencedOffError` unless this token's acquisition is still the newest.

        ``action`` names what would have happened (for the message)."""
        newest = highest_fence(self.objects)
        if newest is not None and newest.get("fence") == self.fence and newest.get("token") == self.token:
            return
        raise self.fenced_off(action, newest)

    def fenced_off(self, action: str, newest: dict[str, Any] | None) -> FencedOffError:
        attempt = f"attempt {self.attempt}, " if self.attempt is not None else ""
        if newest is None:
            by = f"the lease records under {self.objects.describe(LEASE_PREFIX)} were deleted"
        else:
            by = (f"pipeline {self.pipeline} was {_DID.get(str(newest.get('purpose')), 'taken over')} at "
                  f"{newest.get('started_at')} by pid {newest.get('pid')} on {newest.get('host')} "
                  f"(fence {newest.get('fence')})")
        return FencedOffError(
            f"fenced off: {by}; this driver ({attempt}fence {self.fence}) lost its lease (its heartbeat "
            f"stopped for longer than the lease TTL: a stall or a partition) and stops without {action}. "
            "Nothing it would have written counts; the newer holder continues the pipeline")


class JobLease:
    """The lease of ``pipeline``: on ``store`` (the checkpoint store) when given, else the
    legacy file ``<work_dir>/job.lease``. A context manager; see the module docstring."""

    def __init__(self, work_dir: Path, pipeline: str, purpose: Purpose = "run", *,
                 store: ObjectStore | None = None, ttl: float | None = None) -> None:
        self.path = work_dir / "job.lease"
        self.pipeline = pipeline
        self.purpose = purpose
        self.store = store
        self.ttl = ttl if ttl is not None else default_ttl()
        self.token: FenceToken | None = None
        #: The newer holder's record once the heartbeat found this lease taken over.
        self.lost: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name("job.lease.lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _refuse(self, holder: dict[str, object], where: str) -> JobAlreadyRunningError:
        purpose = str(holder.get("purpose", "run"))
        return JobAlreadyRunningError(
            f"pipeline {self.pipeline} {_WHAT.get(purpose, 'is busy')} ({describe(holder)}; lease {where}); wait "
            f"for it or stop it first (a holder that stopped heartbeating is taken over after its TTL of "
            f"{holder.get('ttl_seconds', self.ttl)} s)")

    @staticmethod
    def _mine(holder: dict[str, object]) -> bool:
        return holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()

    def acquire(self) -> None:
        """Take the lease; raises :class:`JobAlreadyRunningError` naming the holder and what it
        does. The same process may take it again (tests run jobs one after another in-process);
        each acquisition on a store gets a new, higher fencing number (:attr:`token`)."""
        with self._locked():
            local = lease_holder(self.path.parent)
            if local is not None and "fence" not in local and not self._mine(local):
                raise self._refuse(local, str(self.path))  # a legacy (store-less) holder of this work dir
            started = datetime.now(UTC).isoformat()
            mirror: dict[str, object] = {"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                                         "started_at": started}
            if self.store is not None:
                self.token = self._acquire_on_store(self.store, started)
                mirror.update(fence=self.token.fence, store=self.store.uri)
            write_atomic(self.path, json.dumps(mirror))
        if self.token is not None:
            self.token.period = self.ttl / 3  # the heartbeat's period
            self._stop.clear()
            self._heartbeat = threading.Thread(target=self._beat, name=f"lease-{self.pipeline}", daemon=True)
            self._heartbeat.start()

    def _acquire_on_store(self, objects: ObjectStore, started: str) -> FenceToken:
        with _probe_lock:
            if objects.uri not in _probed:
                objects.check_conditional_writes(PROBE_KEY)
                _probed.add(objects.uri)
        where = objects.describe(LEASE_PREFIX)
        for _ in range(5):
            holder = _store_holder(objects)
            if holder is not None and not self._mine(holder):
                raise self._refuse(holder, where)
            fences = _records(objects)["fence"]
            fence = max(fences, default=0) + 1
            token = uuid.uuid4().hex
            record = {"format": "barrierflow-lease", "pipeline": self.pipeline, "fence": fence, "token": token,
                      "pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                      "started_at": started, "ttl_seconds": self.ttl}
            if objects.put_if_absent(fence_key(fence), json.dumps(record).encode()):
                self._compact(objects, fence)
                log.info("pipeline %s: lease taken for %s with fence %d (%s)", self.pipeline, self.purpose, fence,
                         where)
                return FenceToken(objects, self.pipeline, fence, token, self.purpose)
        # Lost the race every time: someone else keeps acquiring.
        holder = _store_holder(objects)
        raise self._refuse(holder or {"purpose": "run"}, where)

    @staticmethod
    def _compact(objects: ObjectStore, fence: int) -> None:
        old = [key for kind, numbers in _records(objects).items() for n in numbers if n < fence - KEEP_RECORDS
               for key in [f"{LEASE_PREFIX}{kind}-{n:012d}.json"]]
        if old:
            with contextlib.suppress(Exception):
                objects.delete_many(old)

    def _beat(self) -> None:
        token = self.token
        assert token is not None
        while not self._stop.wait(self.ttl / 3):
            token.beat_started = time.monotonic()
            try:
                newest = highest_fence(token.objects)
                if newest is None or newest.get("token") != token.token:
                    self.lost = token.lost = newest or {}
                    log.error("%s", token.fenced_off("anything more", newest))
                    return
                token.objects.put_bytes(heartbeat_key(token.fence), json.dumps(
                    {"fence": token.fence, "token": token.token, "at": datetime.now(UTC).isoformat()}).encode())
                token.confirmed_at, token.beat_failed = token.beat_started, False
            except Exception as exc:  # a store outage: the next beat tries again; fencing stays safe
                token.beat_failed = True
                log.warning("pipeline %s: lease heartbeat failed: %s", self.pipeline, exc)
            finally:
                token.beat_started = None

    def check(self, action: str) -> None:
        """:meth:`FenceToken.check` of this lease (a no-op for a store-less lease)."""
        if self.token is not None:
            self.token.check(action)

    def release(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
            self._heartbeat = None
        if self.token is not None:
            token, self.token = self.token, None
            try:
                newest = highest_fence(token.objects)
                if newest is not None and newest.get("token") == token.token:
                    token.objects.put_bytes(released_key(token.fence), json.dumps(
                        {"fence": token.fence, "at": datetime.now(UTC).isoformat()}).encode())
            except Exception as exc:  # the TTL frees it then
                log.warning("pipeline %s: could not release the lease (fence %d): %s; it expires after %.0f s",
                            self.pipeline, token.fence, exc, self.ttl)
        with self._locked():
            lease = _read(self.path)
            if lease is not None and lease.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> JobLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
