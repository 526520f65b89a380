"""The ready file of a stage process: written by the process once its query runs, read by its
supervisor and by ``barrierflow chaos`` (which kills only stage processes that are ready).

The file is ``<stage work dir>/_process_ready.json`` holding ``{"pid": <pid>}``, written
atomically (a temporary file, then a rename), so a reader sees either nothing or the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path

READY_FILE = "_process_ready.json"


def ready_pid(stage_dir: Path) -> int | None:
    """The pid a stage process in ``stage_dir`` reported once its query ran; None before (or
    when the file cannot be read: it is written atomically, so only someone else's file is)."""
    try:
        return int(json.loads((stage_dir / READY_FILE).read_text(encoding="utf-8"))["pid"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
