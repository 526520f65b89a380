"""Helpers shared by the throwaway test servers: free ports, log tails, stopping processes."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)


def log_tail(path: Path, limit: int = 4000) -> str:
    """The last ``limit`` characters of a server's log file ('' if unreadable)."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """Terminate ``proc``; kill it if it has not exited after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("%s pid %s ignored SIGTERM; killing it", what, proc.pid)
        proc.kill()
        proc.wait(timeout=timeout)
