"""A pipeline's lease: one process at a time runs, restores or reconciles a work directory.

``<work_dir>/job.lease`` holds ``{"pid", "host", "purpose", "started_at"}`` while a job runs
(purpose ``run``), a restore rebuilds its Spark checkpoint (``restore``) or a reconciliation
finishes transactions of a stopped job (``reconcile``). Acquiring is atomic on one host (the
check and the write happen under ``flock`` of ``job.lease.lock``); a lease whose process is
gone (same host) is stale and is taken over; a lease of another host is taken as live,
since its process cannot be checked from here.

Reconciliation asks :func:`lease_holder` whether transactions may still be in flight (a
job runs) or whether it must not touch the sinks at all (a restore is deciding them).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from barrierflow.errors import UserInputError

Purpose = Literal["run", "restore", "reconcile"]
_WHAT = {"run": "is running", "restore": "is being restored", "reconcile": "is being reconciled"}


class JobAlreadyRunningError(UserInputError):
    """Another live process holds the pipeline's lease (same work directory)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> dict[str, object] | None:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError):
        return None


def lease_holder(work_dir: Path) -> dict[str, object] | None:
    """The live lease of ``work_dir`` (``pid``, ``host``, ``purpose``, ``started_at``), or None."""
    lease = _read(work_dir / "job.lease")
    if lease is None:
        return None
    lease.setdefault("purpose", "run")
    if lease.get("host") != socket.gethostname():
        return lease  # cannot check another host's process: assume it is alive
    return lease if _alive(int(lease["pid"])) else None  # type: ignore[call-overload]


def job_running(work_dir: Path) -> bool:
    """Whether any live process holds the lease (a job, a restore or a reconciliation)."""
    return lease_holder(work_dir) is not None


def describe(lease: dict[str, object]) -> str:
    return f"pid {lease.get('pid')} on {lease.get('host')}, since {lease.get('started_at')}"


class JobLease:
    def __init__(self, work_dir: Path, pipeline: str, purpose: Purpose = "run") -> None:
        self.path = work_dir / "job.lease"
        self.pipeline = pipeline
        self.purpose = purpose

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name("job.lease.lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def acquire(self) -> None:
        """Take the lease; raises :class:`JobAlreadyRunningError` naming the holder and what it
        does. The same process may take it again (tests run jobs one after another in-process)."""
        with self._locked():
            holder = lease_holder(self.path.parent)
            if holder is not None and not (holder.get("pid") == os.getpid()
                                           and holder.get("host") == socket.gethostname()):
                purpose = str(holder.get("purpose", "run"))
                raise JobAlreadyRunningError(
                    f"pipeline {self.pipeline} {_WHAT.get(purpose, 'is busy')} ({describe(holder)}; lease "
                    f"{self.path}); wait for it or stop it first, or delete the lease if that process is gone"
                )
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                                       "started_at": datetime.now(UTC).isoformat()}), encoding="utf-8")
            os.replace(tmp, self.path)

    def release(self) -> None:
        with self._locked():
            lease = _read(self.path)
            if lease is not None and lease.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> JobLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
