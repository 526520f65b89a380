"""The shared reading of one Spark metadata log (``offsets/`` or ``commits/``).

Each file is named after its batch id and starts with a version line ``v<N>`` (Spark's
``HDFSMetadataLog.validateVersion``); the body follows. A version newer than
:data:`MAX_VERSION` means a Spark this barrierflow was not written for: reading it fails with
:class:`~barrierflow.spark.errors.SparkLogError` instead of guessing.
"""

from __future__ import annotations

import re

from barrierflow.spark.errors import SparkLogError
from barrierflow.storage.object_dir import CheckpointDir, listdir

#: The newest log version barrierflow understands (Spark 4.x writes ``v1``).
MAX_VERSION = 1
_VERSION = re.compile(r"^v(\d+)$")


def batch_ids(directory: CheckpointDir) -> list[int]:
    """The batch ids that have a file in ``directory`` (local or on object storage), ascending
    (none if it is missing)."""
    try:
        names = listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def read_lines(path: CheckpointDir) -> list[str]:
    """The lines of a log file after its version line, which is checked.

    Raises FileNotFoundError if the file does not exist, :class:`SparkLogError` if its
    version line is missing, malformed or newer than :data:`MAX_VERSION`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    first = lines[0].strip() if lines else ""
    match = _VERSION.match(first)
    if match is None:
        raise SparkLogError(
            f"{path} does not start with a log version line (found {first[:40]!r}); it was not written by "
            "Spark's streaming engine or is truncated: restore a checkpoint into a fresh work_dir")
    if int(match.group(1)) > MAX_VERSION:
        raise SparkLogError(
            f"{path} has log version {first}, newer than v{MAX_VERSION} which this barrierflow reads; "
            "run the Spark version the job was started with, or upgrade barrierflow")
    return lines[1:]
