"""``barrierflow lake read``: every lakehouse table of a pipeline as of one cut (one completed
checkpoint): the Iceberg snapshot id or Delta version each table had when that checkpoint's
output was committed (:mod:`barrierflow.batch.lake_cut`). ``barrierflow lake maintain``: table
maintenance that keeps what the restore rule and the retained cuts need
(:mod:`barrierflow.retention.table_maintenance`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from barrierflow.batch.lake_cut import cut_tables, newest_cut, table_sinks
from barrierflow.pipeline.model import open_pipeline
from barrierflow.retention.table_maintenance import (
    DEFAULT_OLDER_THAN_HOURS,
    DEFAULT_RETENTION_HOURS,
    TableMaintenance,
    maintain_tables,
)
from barrierflow.sinks.cut import CutLog, TableVersion


@dataclass(frozen=True)
class LakeCut:
    """The tables (``<stage>/<sink>`` -> version, None: nothing committed yet) as of ``checkpoint_id``."""

    checkpoint_id: int
    tables: dict[str, TableVersion | None]

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint_id": self.checkpoint_id,
                "tables": {name: (v.as_dict() if v is not None else None) for name, v in self.tables.items()}}

    def lines(self) -> list[str]:
        out = [f"cut of checkpoint {self.checkpoint_id}:"]
        for name, version in self.tables.items():
            if version is None or version.version is None:
                out.append(f"  {name}: nothing committed yet")
                continue
            what = "snapshot" if version.format == "iceberg" else "version"
            out.append(f"  {name}: {version.format} {version.table} {what} {version.version} "
                       f"(committed with checkpoint {version.checkpoint_id})")
        return out


def lake_cut(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> LakeCut:
    """The cut of ``checkpoint_id`` (None: the newest one every table stage recorded).

    Raises:
        UserInputError: the pipeline writes no table, or the checkpoint has no cut record.
    """
    if checkpoint_id is None:
        checkpoint_id = newest_cut(spec_path)
    return LakeCut(checkpoint_id, cut_tables(spec_path, checkpoint_id))


def cut_ids(spec_path: str | os.PathLike[str]) -> list[int]:
    """The checkpoint ids whose cut every stage writing a table recorded completely (its record
    lists every table sink of the stage), ascending; [] when none is recorded yet or the
    pipeline writes no Iceberg or Delta table. Lists keys and reads the retained records
    (small JSON documents; the tables asset's watcher polls it)."""
    pipeline = open_pipeline(spec_path)
    ids = [set(CutLog(stage.store.objects).checkpoints([s.name for s in table_sinks(stage)]))
           for stage in pipeline.stages if table_sinks(stage)]
    return sorted(set.intersection(*ids)) if ids else []
@dataclass(frozen=True)
class LakeMaintenance:
    """What ``lake maintain`` did to each table of a pipeline."""

    pipeline: str
    tables: list[TableMaintenance]

    def as_dict(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "tables": [t.as_dict() for t in self.tables]}

    def lines(self) -> list[str]:
        lines = [f"  {line}" for table in self.tables for line in table.lines()]
        return [f"maintenance of pipeline {self.pipeline!r}:", *lines]


def maintain(spec_path: str | os.PathLike[str], *, older_than_hours: float = DEFAULT_OLDER_THAN_HOURS,
             retention_hours: int = DEFAULT_RETENTION_HOURS) -> LakeMaintenance:
    """Maintain every Iceberg and Delta table of the pipeline at ``spec_path``
    (:func:`~barrierflow.retention.table_maintenance.maintain_tables`).

    Raises:
        UserInputError: the pipeline writes no table, or a negative retention.
    """
    from barrierflow.errors import UserInputError
    from barrierflow.spec.loader import load_any_spec

    if retention_hours < 0:
        raise UserInputError(f"--retention-hours must be 0 or more, got {retention_hours}")
    name = load_any_spec(spec_path).name
    return LakeMaintenance(name, maintain_tables(spec_path, older_than_hours=older_than_hours,
                                                 retention_hours=retention_hours))
