"""The reports the batch jobs (rollups, the stream-vs-batch comparison) store, read back for the
DAG run that ran them."""

from __future__ import annotations

import os
from typing import Any

from barrierflow.airflow.errors import BatchReportError

#: How many differences the XCom of the stream-vs-batch comparison lists (the stored report lists more).
XCOM_DIFFERENCES = 100


def batch_report(spec_path: str | os.PathLike[str], name: str, *, tag: str, stage: str | None = None
                 ) -> dict[str, Any]:
    """The stored ``rollups`` or ``recompute`` report written by the batch job run with ``--tag
    tag`` (the DAG run's id), its differences cut to :data:`XCOM_DIFFERENCES` for XCom. ``stage``:
    for a pipeline of several stages, the final stage (its report is in the stage's own store).
    A report only under its legacy key (``reports/reconciliation-latest.json``, see
    :func:`barrierflow.ops.batch.stored_report`) is read too; it was written before the rename,
    so it is another run's and its run is named.

    Raises:
        BatchReportError: no report, or one of another run (naming the run and where it is).
    """
    from barrierflow.ops.batch import REPORT_KEYS, stored_report

    found = stored_report(spec_path, name, stage)
    if found is None or found.document.get("tag") != tag:
        store = f"the checkpoint store of stage {stage!r}" if stage else "the checkpoint store"
        where = (f"no report is at {REPORT_KEYS[name]}" if found is None
                 else f"the report of run {found.document.get('tag')!r} is at {found.key}")
        raise BatchReportError(
            f"pipeline {spec_path}: the batch job of run {tag!r} left no {name} report ({where} in {store}): "
            "see the spark-submit task's log for why the job failed")
    document = found.document
    if len(document.get("differences") or []) > XCOM_DIFFERENCES:
        document["differences"] = document["differences"][:XCOM_DIFFERENCES]
    return document
