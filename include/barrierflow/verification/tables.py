"""``verify`` of a cut's lakehouse tables: every table the cut record names is still at that
version in the table, and that version is the commit the record says.

One check per Iceberg or Delta sink of every stage, named ``table <stage>/<sink>``
(:func:`table_checks`):

* the cut records a version: the table is opened with the format's own reader (pyiceberg, the
  ``deltalake`` package) at that Iceberg snapshot id or Delta version, and the commit
  properties of that version (``barrierflow.pipeline``, ``.stage``, ``.sink``,
  ``.checkpoint-id``) are compared with the sink's and the checkpoint the record says wrote it;
  for Delta every data file of the version must still exist. Passed only when compared; an
  expired Iceberg snapshot, a Delta version whose log or files are gone (VACUUM) or other
  properties are a failure naming the table and the fix.
* the cut records that nothing was committed yet, or no cut record lists the table
  (``commit_every`` N > 1 held the checkpoint): skipped, "not compared", saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from barrierflow.pipeline.table_cut import COMMITTED, CutTable, cut_table_versions, table_sinks
from barrierflow.sinks.table import PROP_CHECKPOINT, PROP_PIPELINE, PROP_SINK, PROP_STAGE
from barrierflow.spec.lakehouse import IcebergSinkSpec
from barrierflow.verification.report import CheckResult

if TYPE_CHECKING:
    from barrierflow.pipeline.model import Stage

__all__ = ["table_checks"]

_FIX = ("the cut can no longer be read as of this checkpoint: keep the versions of retained checkpoints "
        "(expire Iceberg snapshots and VACUUM Delta tables only older than the oldest retained checkpoint's cut, as "
        "the maintenance DAG does), or restore a later checkpoint whose cut verifies")


def table_checks(stages: Sequence[Stage], checkpoint_id: int) -> list[CheckResult]:
    """One check per table of the pipeline (``stages``) as cut ``checkpoint_id`` recorded it
    (module docstring); empty when it writes no table. Never raises for a table that cannot be
    read: that is a failed check."""
    from barrierflow.sinks.factory import pipeline_and_stage

    by_stage = {s.name: s for s in stages}
    checks = []
    for table in cut_table_versions(stages, checkpoint_id):
        stage = by_stage[table.stage]
        name = f"table {table.name}"
        if table.status != COMMITTED:
            held = (f"; its sink commits every {table.commit_every} checkpoints with rows"
                    if table.commit_every > 1 else "")
            checks.append(CheckResult.skip(name, f"not compared: {table.format} {table.table} is {table.status} "
                                                 f"(the cut records no version of it){held}"))
            continue
        sink = next(s for s in table_sinks(stage) if s.name == table.sink)
        pipeline, stage_name = pipeline_and_stage(stage.spec)
        expected = {PROP_PIPELINE: pipeline, PROP_STAGE: stage_name, PROP_SINK: sink.name,
                    PROP_CHECKPOINT: str(table.committed_with)}
        try:
            properties = (_iceberg_properties(sink, stage, table) if isinstance(sink, IcebergSinkSpec)
                          else _delta_properties(sink.path, table))
        except _Missing as exc:
            checks.append(CheckResult.fail(name, f"{exc}; {_FIX}"))
            continue
        except Exception as exc:  # the format's reader failed: the table cannot be read at that version
            checks.append(CheckResult.fail(name, f"{table.format} {table.table} cannot be read at "
                                                 f"{_what(table)}: {type(exc).__name__}: {exc}; {_FIX}"))
            continue
        wrong = {k: (properties.get(k), v) for k, v in expected.items() if str(properties.get(k)) != v}
        if wrong:
            said = ", ".join(f"{k} is {got!r}, the cut expects {want!r}" for k, (got, want) in sorted(wrong.items()))
            checks.append(CheckResult.fail(name, f"{table.format} {table.table} at {_what(table)} is not this "
                                                 f"pipeline's commit of checkpoint {table.committed_with}: {said}; "
                                                 "another writer or pipeline committed under this name, or the cut "
                                                 "record was altered: do not read this cut"))
            continue
        checks.append(CheckResult.ok(name, f"{table.format} {table.table} at {_what(table)} is this sink's commit "
                                           f"of checkpoint {table.committed_with}"))
    return checks


class _Missing(Exception):
    """The version the cut names is gone from the table."""


def _what(table: CutTable) -> str:
    return f"{'snapshot' if table.format == 'iceberg' else 'version'} {table.version}"


def _iceberg_properties(sink: IcebergSinkSpec, stage: Stage, table: CutTable) -> dict[str, Any]:
    from barrierflow.sinks.iceberg import open_catalog

    loaded = open_catalog(sink.catalog, stage.layout.work_dir).load_table(sink.table)
    snapshot = loaded.snapshot_by_id(int(table.version or 0))
    if snapshot is None:
        raise _Missing(f"iceberg {table.table} has no snapshot {table.version} (expired, or the table was replaced)")
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def _delta_properties(path: str, table: CutTable) -> dict[str, Any]:
    from deltalake import DeltaTable

    from barrierflow.sinks.delta import table_uri
    from barrierflow.storage import open_store

    try:
        loaded = DeltaTable(table_uri(path), version=table.version)
    except Exception as exc:
        raise _Missing(f"delta {table.table} has no version {table.version} ({type(exc).__name__}: {exc})") from exc
    store = open_store(path)
    from urllib.parse import unquote

    paths = [unquote(str(p)) for p in loaded.get_add_actions(flatten=True).column("path").to_pylist()]
    gone = [p for p in paths if not store.exists(p)]
    if gone:
        raise _Missing(f"delta {table.table} at version {table.version} lacks {len(gone)} of its data files "
                       f"(removed by VACUUM?), e.g. {gone[0]}")
    newest = DeltaTable(table_uri(path))
    latest = newest.version()
    # One entry per version, newest first (as the sink reads it: the entries' own "version" field
    # is not reliable on every delta-rs release).
    info = next((h for i, h in enumerate(newest.history()) if latest - i == table.version), None)
    if info is None:
        raise _Missing(f"delta {table.table} has no commit information of version {table.version}")
    return dict(info)
