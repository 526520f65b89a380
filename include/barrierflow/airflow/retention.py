"""The scheduled retention: ``barrierflow retain SPEC --json`` once."""

from __future__ import annotations

import os
from typing import Any


def retain_checkpoints(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> dict[str, Any]:
    """One retention run of the pipeline, as ``barrierflow retain SPEC [--dry-run] --json``.

    Keeps the newest ``checkpoint.retained`` completed checkpoints (verified ones preferred
    unless ``verification.prefer_verified`` is false) and every savepoint; deletes the rest,
    incomplete checkpoints past ``checkpoint.timeout`` and unreferenced shared files (see
    :mod:`barrierflow.retention.plan`). Safe while the job runs: in-flight checkpoints reserve
    their files.

    Returns:
        The JSON document of ``barrierflow retain --json`` (``kept``, ``savepoints``,
        ``deleted``, ``bytes_freed``, ...).

    Raises:
        SpecError: the spec does not load.
        StorageError: the checkpoint store cannot be read or written.
    """
    from barrierflow.ops.retain import retain

    return retain(spec_path, dry_run=dry_run).as_dict()
