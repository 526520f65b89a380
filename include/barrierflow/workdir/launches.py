"""The records of a detached launch in a pipeline's work dir (``<work_dir>/launches/``).

:func:`barrierflow.ops.detached_launch.start_detached` writes a :class:`LaunchRecord` per launch
(``<launch_id>.json``) and its launcher an exit record when it ends (``<launch_id>.exit.json``);
the Airflow side's watch (:mod:`barrierflow.ops.pipeline_watch`) reads both. The launches of one
chain (a launch and its relaunches after lost hosts) share a restart ledger,
``<chain>.restarts.json`` (:mod:`barrierflow.runtime.restart_ledger`).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["LAUNCHES", "LaunchRecord", "launcher_alive", "process_identity", "read_exit"]

#: The folder of the launch records under a pipeline's work dir.
LAUNCHES = "launches"


@dataclass(frozen=True)
class LaunchRecord:
    """What :func:`barrierflow.ops.detached_launch.start_detached` wrote (``<work_dir>/launches/<launch_id>.json``)."""

    launch_id: str
    spec_path: str
    pid: int
    host: str
    started_at: str
    log: str
    exit_file: str
    command: list[str]
    #: The launcher's identity on its host (:func:`process_identity`): a pid reused after a
    #: restart of the host or container is not taken for the launcher.
    identity: str | None = None
    #: The pipeline's name (the spec's ``name``).
    pipeline: str = ""
    #: The first launch of the chain this one belongs to (a relaunch after a lost host continues
    #: its chain); empty: this launch is the first.
    chain: str = ""

    @property
    def chain_id(self) -> str:
        """The id of the chain's first launch (this one's own when it is the first)."""
        return self.chain or self.launch_id

    @property
    def ledger_path(self) -> Path:
        """The chain's restart ledger (:mod:`barrierflow.runtime.restart_ledger`), beside the records."""
        return Path(self.exit_file).with_name(f"{self.chain_id}.restarts.json")

    @property
    def path(self) -> Path:
        return Path(self.exit_file).with_name(f"{self.launch_id}.json")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> LaunchRecord:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


def process_identity(pid: int) -> str | None:
    """``<boot id>:<start time>`` of process ``pid`` of this host (Linux ``/proc``), or None
    when it does not run or cannot be read: two processes with the same pid differ in it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return f"{boot}:{fields[19]}" if len(fields) > 19 and fields[0] != "Z" else None


def launcher_alive(record: LaunchRecord) -> bool | None:
    """Whether the launcher of ``record`` still runs: None when it ran on another host (this
    host cannot see it), else whether its pid runs as the same process that was started."""
    if record.host != socket.gethostname():
        return None
    current = process_identity(record.pid)
    if current is None:
        return False
    return record.identity is None or current == record.identity


def read_exit(record: LaunchRecord) -> dict[str, Any] | None:
    """The launcher's exit record, or None while it has not written one."""
    try:
        return dict(json.loads(Path(record.exit_file).read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError):
        return None
