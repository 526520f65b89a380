"""The scheduled 2PC reconciliation: ``barrierflow reconcile SPEC --json`` once."""

from __future__ import annotations

import os
from typing import Any


def reconcile_transactions(spec_path: str | os.PathLike[str], *, dry_run: bool = False) -> dict[str, Any]:
    """One reconciliation of the pipeline's sink transactions, as ``barrierflow reconcile SPEC
    [--dry-run] --json``.

    Every unfinished transaction is decided against the latest completed checkpoint T (see
    :mod:`barrierflow.recovery.reconcile`): COMMIT when T covers its epoch; otherwise ABORT when
    the job is not running (its run lease is not held), and NONE (left alone, only reported)
    while it runs, because such a transaction may still be in flight. Unless ``dry_run``, the
    decisions are applied, exactly as planned.

    Returns:
        The JSON document of ``barrierflow reconcile --json``: ``pipeline``,
        ``latest_completed`` (T, or None), ``job_running``, ``decisions`` (``sink``,
        ``transaction_id``, ``checkpoint_id``, ``state``, ``action``, ``reason`` each) and
        ``dry_run``.

    Raises:
        SpecError: the spec does not load.
        SinkError, StorageError: a sink or the checkpoint store failed; decisions applied
            before the failure stay applied; the next run plans the rest anew.
    """
    from barrierflow.ops.reconcile import reconcile

    return reconcile(spec_path, dry_run=dry_run).as_dict()
