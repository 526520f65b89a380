"""What a benchmark record says about the code it measured: the repository's commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["commit"]

_ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The repository's commit (12 hex digits, with ``+dirty`` when tracked files have
    changes), or ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
