"""A pipeline's run lease: one running job per work directory.

``<work_dir>/job.lease`` holds ``{"pid", "host", "started_at"}`` while a job runs. A lease
whose process is gone (same host) is stale and is taken over. Reconciliation asks
:func:`job_running` to decide whether unfinished transactions may still be in flight.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from barrierflow.errors import UserInputError


class JobAlreadyRunningError(UserInputError):
    """Another live process runs the same pipeline (same work directory)."""


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


def job_running(work_dir: Path) -> bool:
    lease = _read(work_dir / "job.lease")
    if lease is None:
        return False
    if lease.get("host") != socket.gethostname():
        return True  # cannot check another host's process: assume it runs
    return _alive(int(lease["pid"]))  # type: ignore[call-overload]


class JobLease:
    def __init__(self, work_dir: Path, pipeline: str) -> None:
        self.path = work_dir / "job.lease"
        self.pipeline = pipeline

    def acquire(self) -> None:
        if job_running(self.path.parent):
            lease = _read(self.path) or {}
            if lease.get("pid") != os.getpid():
                raise JobAlreadyRunningError(
                    f"pipeline {self.pipeline} is already running (pid {lease.get('pid')} on {lease.get('host')}, "
                    f"lease {self.path}); stop it first, or delete the lease if that process is gone"
                )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                   "started_at": datetime.now(UTC).isoformat()}), encoding="utf-8")
        os.replace(tmp, self.path)

    def release(self) -> None:
        lease = _read(self.path)
        if lease is not None and lease.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
