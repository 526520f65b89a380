"""Maintenance of a pipeline's lakehouse tables that never removes what a restore or a retained
cut needs (``barrierflow lake maintain``, the ``maintain`` DAG).

Per Iceberg or Delta sink of every stage (a stage may write several), what must stay readable:

* the version the **restore rule** reads: the commit carrying the sink's largest committed
  checkpoint id (Iceberg: found along the current snapshot's ancestry, so that ancestry must
  reach it unbroken; Delta: the transaction version for the sink's ``txnAppId``, kept by the log
  itself);
* the version every **cut record** in the stage's checkpoint store names (cut records live as
  long as their checkpoints: retention decides which are kept, savepoints included).

What is done:

* **Iceberg**: compact, then expire snapshots. pyiceberg (0.12) has no data-file rewrite
  (``rewrite_data_files``), so the compaction is pyiceberg's ``overwrite``: each partition with
  at least two files smaller than ``target_size`` is read as of the current snapshot and written
  back as new files in one overwrite (its rows unchanged; a table commit of the stream that lands
  meanwhile makes the overwrite fail, and nothing changes). It rewrites the partition's rows in
  memory: meant for partitions of a size that fits, as small files are. Tables partitioned by
  a transform other than identity are not compacted. Then every snapshot older than
  ``older_than`` is expired (pyiceberg ``ExpireSnapshots``) except the current snapshot's
  ancestry down to the oldest snapshot needed, and the needed ones. pyiceberg edits the table
  metadata only; it deletes no file (the files of expired snapshots stay until an orphan-file
  cleanup, which must keep files younger than the longest time an epoch waits for its commit).
* **Delta**: ``OPTIMIZE`` (``deltalake``'s compaction into files of ``target_size`` bytes: a new
  version that removes the small files and adds the compacted ones; the transaction versions are
  unchanged), then ``VACUUM`` in full mode (``deltalake``'s plan, a dry run, then deleted here):
  the files no version inside ``retention_hours`` and no needed version references are deleted,
  files the log never knew included, except a data file a pending epoch already moved into the
  table (``bf-<stage>-<sink>-c<checkpoint>-...`` above the committed checkpoint, not in the log
  yet: its table commit is still to come). Write-ahead files live under ``_barrierflow_staging``,
  which VACUUM never lists.

Run it between checkpoints or while the pipeline is stopped: a table commit of the stream that
lands during the maintenance is kept (Iceberg: the expiry is one more metadata commit, retried
by the catalog's check; Delta: an append and a compaction do not conflict), and a crash of
either side leaves nothing the other needs removed.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from barrierflow.pipeline.model import Stage, open_pipeline
from barrierflow.pipeline.table_output import ours, table_sinks, table_stages
from barrierflow.sinks.cut import CutLog
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec

log = logging.getLogger(__name__)

#: Delta: VACUUM keeps files removed within this many hours (Delta's own default is a week).
DEFAULT_RETENTION_HOURS = 168
#: Data files below this many bytes are small: compacted (Iceberg: a partition with two or more).
DEFAULT_TARGET_SIZE = 128 * 1024 * 1024
#: Iceberg: only snapshots older than this are expired.
DEFAULT_OLDER_THAN_HOURS = 0.0
_PUBLISHED = re.compile(r"-c(?P<checkpoint>\d+)-a\d+-b\d+-\d+\.parquet$")


@dataclass
class TableMaintenance:
    """What one table's maintenance did: ``kept`` (the versions it had to keep: the restore
    rule's and the cut records'), ``expired`` (Iceberg snapshots), ``compacted`` (files removed
    and added by the compaction), ``vacuumed`` (Delta: files deleted), ``not_done`` (what this
    format's client cannot do, one line)."""

    table: str
    format: str
    kept: list[int] = field(default_factory=list)
    restore_version: int | None = None
    committed_checkpoint: int | None = None
    expired: list[int] = field(default_factory=list)
    compacted: dict[str, int] = field(default_factory=dict)
    vacuumed: list[str] = field(default_factory=list)
    not_done: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        head = (f"{self.table}: {self.format}; kept {len(self.kept)} version(s) the cut records and the restore rule "
                f"need (restore rule: checkpoint {self.committed_checkpoint} in version {self.restore_version})")
        out = [head]
        compacted = f"{self.compacted.get('removed', 0)} file(s) compacted into {self.compacted.get('added', 0)}"
        if self.format == "iceberg":
            out.append(f"  {compacted}; expired {len(self.expired)} snapshot(s)")
        else:
            out.append(f"  OPTIMIZE: {compacted}; VACUUM: {len(self.vacuumed)} file(s) deleted")
        if self.not_done:
            out.append(f"  not done: {self.not_done}")
        return out


def maintain_tables(spec_path: str | os.PathLike[str], *, older_than_hours: float = DEFAULT_OLDER_THAN_HOURS,
                    retention_hours: int = DEFAULT_RETENTION_HOURS, target_size: int | None = None,
                    now: datetime | None = None) -> list[TableMaintenance]:
    """Maintain every Iceberg and Delta table of the pipeline at ``spec_path`` (module docstring).

    Raises:
        UserInputError: the pipeline writes no table.
    """
    pipeline = open_pipeline(spec_path)
    now = now or datetime.now(UTC)
    done = []
    for name, stage in table_stages(pipeline).items():
        cuts = _cuts(stage)
        for sink in table_sinks(stage.spec):
            label = f"{name}/{sink.name}"
            needed = {v.version for cut in cuts for key, v in cut.items()
                      if key == sink.name and v is not None and v.version is not None}
            if isinstance(sink, IcebergSinkSpec):
                done.append(_maintain_iceberg(stage, sink, label, needed, now - timedelta(hours=older_than_hours),
                                              target_size))
            elif isinstance(sink, DeltaSinkSpec):
                done.append(_maintain_delta(stage, sink, label, needed, retention_hours, target_size))
    return done


def _cuts(stage: Stage) -> list[dict[str, Any]]:
    log_ = CutLog(stage.store.objects)
    return [cut for cid in log_.checkpoints() if (cut := log_.get(cid)) is not None]


def _compact_iceberg(table: Any, target_size: int) -> tuple[dict[str, int], str]:
    """Rewrite each partition of ``table`` holding at least two data files below ``target_size``
    bytes (module docstring); returns ``{"removed": files, "added": files}`` and what was not done."""
    from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, IsNull

    spec = table.spec()
    if any(str(f.transform) != "identity" for f in spec.fields):
        return {}, "not compacted: the table is partitioned by a transform other than identity"
    columns = [table.schema().find_column_name(f.source_id) for f in spec.fields]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for task in table.scan().plan_files():
        values = tuple(task.file.partition[i] for i in range(len(columns))) if columns else ()
        groups.setdefault(values, []).append(task.file)
    removed = added = 0
    for values, files in groups.items():
        if sum(1 for f in files if f.file_size_in_bytes < target_size) < 2:
            continue
        where: BooleanExpression = AlwaysTrue()
        for column, value in zip(columns, values, strict=True):
            where = And(where, IsNull(column) if value is None else EqualTo(column, value))
        rows = table.scan(row_filter=where).to_arrow()
        table.overwrite(rows, overwrite_filter=where, snapshot_properties={"barrierflow.maintenance": "compaction"})
        removed += len(files)
        added += sum(1 for task in table.scan(row_filter=where).plan_files())
    return {"removed": removed, "added": added}, ""


def _maintain_iceberg(stage: Stage, sink: IcebergSinkSpec, label: str, needed: set[int],
                      before: datetime, target_size: int | None) -> TableMaintenance:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.table.snapshots import ancestors_of

    from barrierflow.sinks.iceberg import open_catalog

    result = TableMaintenance(label, "iceberg")
    try:
        table = open_catalog(sink.catalog, stage.layout.work_dir).load_table(sink.table)
    except (NoSuchTableError, NoSuchNamespaceError):
        result.not_done = "the table does not exist yet"
        return result
    result.compacted, result.not_done = _compact_iceberg(table, target_size or DEFAULT_TARGET_SIZE)
    ancestry = list(ancestors_of(table.current_snapshot(), table.metadata)) if table.current_snapshot() else []
    for snapshot in ancestry:  # newest first: the restore rule's snapshot is the first of ours
        cid = ours(stage.spec, sink, snapshot.summary.additional_properties if snapshot.summary else {})
        if cid is not None:
            result.restore_version, result.committed_checkpoint = snapshot.snapshot_id, cid
            break
    if result.restore_version is not None:
        needed = needed | {result.restore_version}
    keep = set(needed)
    remaining = set(needed)
    for snapshot in ancestry:  # the ancestry down to the oldest needed snapshot stays unbroken
        if not remaining:
            break
        keep.add(snapshot.snapshot_id)
        remaining.discard(snapshot.snapshot_id)
    if ancestry:
        keep.add(ancestry[0].snapshot_id)
    cutoff = int(before.timestamp() * 1000)
    expire = sorted(s.snapshot_id for s in table.snapshots()
                    if s.snapshot_id not in keep and s.timestamp_ms < cutoff)
    if expire:
        table.maintenance.expire_snapshots().by_ids(expire).commit()
    result.kept, result.expired = sorted(keep & {s.snapshot_id for s in table.snapshots()} | needed), expire
    log.info("%s: expired %d snapshot(s), kept %s", label, len(expire), sorted(keep))
    return result


def _maintain_delta(stage: Stage, sink: DeltaSinkSpec, label: str, needed: set[int], retention_hours: int,
                    target_size: int | None) -> TableMaintenance:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from barrierflow.sinks.delta import table_uri
    from barrierflow.sinks.factory import pipeline_and_stage
    from barrierflow.storage import open_store

    result = TableMaintenance(label, "delta")
    try:
        table = DeltaTable(table_uri(sink.path))
    except TableNotFoundError:
        result.not_done = "the table does not exist yet"
        return result
    pipeline, stage_name = pipeline_and_stage(stage.spec)
    committed = table.transaction_version(f"{pipeline}/{stage_name}/{sink.name}")
    result.committed_checkpoint = committed
    for info in table.history():  # newest first
        cid = ours(stage.spec, sink, info)
        if cid is not None and cid == committed:
            result.restore_version = int(info["version"])
            break
    if result.restore_version is not None:
        needed = needed | {result.restore_version}
    metrics = table.optimize.compact(target_size=target_size)
    result.compacted = {"removed": int(metrics.get("numFilesRemoved", 0)),
                        "added": int(metrics.get("numFilesAdded", 0))}
    table.update_incremental()
    candidates = table.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False,
                              full=True, keep_versions=sorted(needed))
    prefix, pending = f"bf-{stage_name}-{sink.name}-c", []
    for path in candidates:
        name = path.rsplit("/", 1)[-1]
        match = _PUBLISHED.search(name) if name.startswith(prefix) else None
        if match and (committed is None or int(match["checkpoint"]) > committed):
            pending.append(path)
    doomed = sorted(set(candidates) - set(pending))
    if doomed:
        open_store(sink.path).delete_many(doomed)
    result.kept, result.vacuumed = sorted(needed), doomed
    log.info("%s: OPTIMIZE %s, VACUUM deleted %d file(s) (kept versions %s; %d pending file(s) left)", label,
             result.compacted, len(doomed), sorted(needed), len(pending))
    return result
