"""The one place DAG ids are spelled: ``barrierflow_<kind>__<name>``, one DAG per kind and pipeline."""

from __future__ import annotations

#: The kinds of DAG made per pipeline: the triggered, long-running job, its scheduled
#: supervision, the scheduled checkpoint verification and retention, the triggered failure
#: recovery, the scheduled 2PC reconciliation, the scheduled watermark-skew report, the triggered
#: stop (with a savepoint) and, for a Parquet sink or a table, the batch side: daily rollups, the
#: stream-vs-batch comparison, data quality; for Iceberg and Delta tables, the cut of each new
#: cut of the tables and their maintenance.
DAG_KINDS = ("pipeline", "supervise", "verify", "retain", "recover", "reconcile", "skew", "stop", "rollup",
             "recompute", "quality", "chaos", "upgrade", "tables", "maintain")


def dag_id_for(spec_name: str, kind: str) -> str:
    """The DAG id of pipeline ``spec_name`` for ``kind`` (one of :data:`DAG_KINDS`)."""
    if kind not in DAG_KINDS:
        raise ValueError(f"unknown DAG kind {kind!r}; expected one of {', '.join(DAG_KINDS)}")
    if not spec_name:
        raise ValueError("a pipeline name is needed to build a DAG id")
    return f"barrierflow_{kind}__{spec_name}"
