"""A lost launch host, made on purpose: the detached launcher's whole process tree stops at once.

What a lost host or container leaves behind is what :func:`lose_host` leaves: no clean shutdown
(no SIGTERM, no savepoint, no released lease), no exit record of the launcher, and a lease whose
heartbeat stopped. It

1. freezes the launcher and every descendant (SIGSTOP, parents first, listing again until no new
   process appears: a frozen parent starts no child), so from that moment nothing of the launch
   writes anything: not a heartbeat, not an exit record, not a checkpoint;
2. keeps them frozen for ``freeze_seconds`` (a lost host's lease is taken over only once its
   heartbeat is older than its TTL: freezing for the TTL shows the watch exactly that; 0 kills
   at once, and on this host the killed driver's lease is then free as soon as its process is
   gone);
3. SIGKILLs them all and returns once none of them runs.

:func:`running_launch` finds the launch to lose: the newest launch record of the pipeline whose
launcher runs on this host without an exit record.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.workdir.launches import LAUNCHES, LaunchRecord, launcher_alive, read_exit

#: Seconds the killed processes get to disappear.
GONE_TIMEOUT = 30.0


class HostLossError(BarrierflowError):
    """The launch to lose was not found, or its processes did not end."""


@dataclass(frozen=True)
class HostLoss:
    """One lost host: the launch, the processes killed, and when (epoch seconds)."""

    launch: LaunchRecord
    pids: tuple[int, ...]
    killed_at: float


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(") ", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (from /proc), parents first."""
    children = _children()
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace").rsplit(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def lose_host(record: LaunchRecord, *, freeze_seconds: float = 0.0) -> HostLoss:
    """Lose the host of the launch ``record`` (module docstring); returns what was killed.

    Raises:
        HostLossError: the launcher does not run on this host, or its processes did not end.
    """
    if launcher_alive(record) is not True:
        raise HostLossError(f"launch {record.launch_id}: its launcher (pid {record.pid} on {record.host}) does not run "
                            "on this host; lose a host from the host itself")
    frozen: list[int] = []
    while True:
        new = [pid for pid in process_tree(record.pid) if pid not in frozen]
        if not new:
            break
        for pid in new:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
    if freeze_seconds > 0:
        time.sleep(freeze_seconds)
    killed_at = time.time()
    for pid in frozen:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + GONE_TIMEOUT
    while (left := [pid for pid in frozen if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        raise HostLossError(f"launch {record.launch_id}: processes {left} did not end within {GONE_TIMEOUT:g} s of "
                            "SIGKILL")
    return HostLoss(record, tuple(frozen), killed_at)


def running_launch(work_dir: str | os.PathLike[str]) -> LaunchRecord | None:
    """The newest launch of the pipeline with this ``work_dir`` whose launcher runs on this host
    without an exit record, or None."""
    folder = Path(work_dir) / LAUNCHES
    records = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        if path.name.endswith((".exit.json", ".restarts.json")):
            continue
        with suppress(OSError, ValueError, TypeError):
            records.append(LaunchRecord.read(path))
    live = [r for r in records if read_exit(r) is None and launcher_alive(r)]
    return max(live, key=lambda r: r.started_at) if live else None
