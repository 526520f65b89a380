"""The lakehouse tables of one cut as the front doors show them (``checkpoints show``, the
Checkpoints page) and ``verify`` checks them.

:func:`cut_table_versions` lists, for every Iceberg and Delta sink of every stage (spec order),
what the stage's cut record of the checkpoint (:mod:`barrierflow.sinks.cut`) says about its
table: the Iceberg snapshot id or Delta version holding exactly the sink's output up to the
checkpoint, and the checkpoint whose commit wrote it. A table the record does not list (a sink
with ``commit_every`` N > 1 holds its epochs until N of them have rows and records no cut of the
checkpoints in between; or its commit had not finished) is "not committed at this checkpoint".
Read-only: only the cut records are read, never the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.pipeline.table_output import table_sinks as stage_table_sinks
from barrierflow.sinks.cut import CutLog
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec

if TYPE_CHECKING:
    from barrierflow.pipeline.model import Stage

__all__ = ["COMMITTED", "NOTHING_YET", "NOT_AT_THIS_CHECKPOINT", "CutTable", "cut_table_versions", "table_sinks"]

COMMITTED = "committed"
NOTHING_YET = "nothing committed yet"
NOT_AT_THIS_CHECKPOINT = "not committed at this checkpoint"


@dataclass(frozen=True)
class CutTable:
    """One table of a cut.

    Attributes:
        stage: the stage writing it (a single-stage pipeline: the pipeline's name).
        sink: the sink's name.
        format: ``iceberg`` or ``delta``.
        table: the Iceberg identifier (``namespace.table``) or the Delta table's storage URI.
        status: :data:`COMMITTED` (``version`` set), :data:`NOTHING_YET` (the cut records that
            the sink committed nothing up to this checkpoint) or :data:`NOT_AT_THIS_CHECKPOINT`
            (no cut record lists it: ``commit_every`` held the checkpoint, or its commit did not
            finish).
        version: the Iceberg snapshot id or Delta version (None unless committed).
        committed_with: the checkpoint whose commit wrote ``version`` (the largest <= this
            checkpoint that had rows; None unless committed).
        commit_every: the sink's ``commit_every``.
    """

    stage: str
    sink: str
    format: str
    table: str
    status: str
    version: int | None
    committed_with: int | None
    commit_every: int

    @property
    def name(self) -> str:
        """``<stage>/<sink>``, as ``barrierflow lake read`` names the table."""
        return f"{self.stage}/{self.sink}"

    def describe(self) -> str:
        """One line: ``iceberg lake.totals: snapshot 123 (committed with checkpoint 4)``."""
        head = f"{self.format} {self.table}"
        if self.status != COMMITTED:
            held = f" (commit_every {self.commit_every})" if self.commit_every > 1 else ""
            return f"{head}: {self.status}{held}"
        what = "snapshot" if self.format == "iceberg" else "version"
        return f"{head}: {what} {self.version} (committed with checkpoint {self.committed_with})"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


def table_sinks(stage: Stage) -> list[IcebergSinkSpec | DeltaSinkSpec]:
    """The Iceberg and Delta sinks of ``stage``, in the spec's order."""
    return stage_table_sinks(stage.spec)


def cut_table_versions(stages: Sequence[Stage], checkpoint_id: int) -> list[CutTable]:
    """Every table of a pipeline (``stages``: its stages) as cut ``checkpoint_id`` recorded it
    (module docstring); empty when the pipeline writes no table.

    Raises:
        StorageError: the checkpoint store cannot be read.
    """
    tables: list[CutTable] = []
    for stage in stages:
        sinks = table_sinks(stage)
        if not sinks:
            continue
        record = CutLog(stage.store.objects).get(checkpoint_id) or {}
        for sink in sinks:
            name = sink.table if isinstance(sink, IcebergSinkSpec) else sink.path
            fmt = "iceberg" if isinstance(sink, IcebergSinkSpec) else "delta"
            if sink.name not in record:
                status, version, committed_with = NOT_AT_THIS_CHECKPOINT, None, None
            else:
                entry = record[sink.name]
                if entry is None or entry.version is None:
                    status, version, committed_with = NOTHING_YET, None, None
                else:
                    status, version, committed_with = COMMITTED, entry.version, entry.checkpoint_id
            tables.append(CutTable(stage.name, sink.name, fmt, name, status, version, committed_with,
                                   sink.commit_every))
    return tables
