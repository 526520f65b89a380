"""Stopping the running pipeline from Airflow: ``barrierflow stop SPEC [--savepoint] --json`` once."""

from __future__ import annotations

import os
from typing import Any


def stop_pipeline(spec_path: str | os.PathLike[str], *, savepoint: bool, timeout_seconds: float) -> dict[str, Any]:
    """Ask the run holding the pipeline's lease (the launch DAG's job, wherever it runs) to stop
    and wait for it, as ``barrierflow stop SPEC [--savepoint] --json`` (see
    :func:`barrierflow.ops.stop.stop`): with ``savepoint``, after one more checkpoint that every
    sink committed, kept as a savepoint. The launch DAG's job then ends with exit 0.

    Returns:
        The JSON document of ``barrierflow stop --json``: ``pipeline``, ``stopped`` (whom),
        ``status``, ``savepoint`` and ``location`` (with a savepoint), ``latest``, ``noun``,
        ``message``.

    Raises:
        NothingToStopError: no run holds the lease.
        StopFailedError, StopTimeoutError: the stop did not complete (the message says whether
            the pipeline keeps running).
    """
    from barrierflow.ops.stop import stop

    result = stop(spec_path, savepoint=savepoint, timeout=timeout_seconds)
    return {"pipeline": result.pipeline, "stopped": result.holder, **result.outcome.as_dict()}
