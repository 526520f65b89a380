"""Reading a pipeline's lakehouse tables as of one cut (one completed checkpoint).

:func:`cut_tables` returns, for every Iceberg and Delta sink of the pipeline (``<stage>/<sink>``;
a single-stage pipeline's stage is the pipeline), the table version that holds exactly the
output up to the checkpoint: an Iceberg snapshot id, a Delta version. It reads the cut records
the sinks write in the checkpoint store (:mod:`barrierflow.sinks.cut`), so every table comes
from the same checkpoint. :func:`read_table_as_of` opens one table at that version with the
table format's own reader (pyiceberg, ``deltalake``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from barrierflow.errors import UserInputError
from barrierflow.pipeline.model import Stage, open_pipeline
from barrierflow.pipeline.table_output import table_sinks as stage_table_sinks
from barrierflow.pipeline.table_output import table_stages
from barrierflow.sinks.cut import CutLog, TableVersion, tables_as_of
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec

if TYPE_CHECKING:
    import pyarrow as pa


def table_sinks(stage: Stage) -> list[IcebergSinkSpec | DeltaSinkSpec]:
    """The Iceberg and Delta sinks of ``stage``, in the spec's order."""
    return stage_table_sinks(stage.spec)


def _expected(stages: dict[str, Stage]) -> dict[str, list[str]]:
    """Each table stage's table sinks' names: what a complete cut record of the stage lists."""
    return {name: [s.name for s in table_sinks(stage)] for name, stage in stages.items()}


def cut_tables(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> dict[str, TableVersion | None]:
    """Every table of the pipeline at ``spec_path`` (every table sink of every stage) as of the
    cut of ``checkpoint_id`` (None: the newest cut); keys ``<stage>/<sink>``, values None for a
    table with nothing committed.

    Raises:
        UserInputError: the pipeline writes no table, or the checkpoint has no complete cut record.
    """
    pipeline = open_pipeline(spec_path)
    stages = table_stages(pipeline)
    stores = {name: stage.store.objects for name, stage in stages.items()}
    return tables_as_of(stores, checkpoint_id, _expected(stages))


def newest_cut(spec_path: str | os.PathLike[str]) -> int:
    """The newest checkpoint id every table stage of the pipeline has a complete cut record of.

    Raises:
        UserInputError: the pipeline writes no table, or no cut is recorded yet.
    """
    pipeline = open_pipeline(spec_path)
    stages = table_stages(pipeline)
    expected = _expected(stages)
    ids = [set(CutLog(stage.store.objects).checkpoints(expected[name])) for name, stage in stages.items()]
    common = sorted(set.intersection(*ids))
    if not common:
        raise UserInputError(f"pipeline {pipeline.spec.name!r}: no cut record yet (no checkpoint has committed its "
                             "tables)")
    return common[-1]


def read_table_as_of(spec_path: str | os.PathLike[str], table: str, checkpoint_id: int | None = None) -> pa.Table:
    """The rows of ``table`` (``<stage>/<sink>``) as of the cut of ``checkpoint_id`` (None: the
    newest), read with pyiceberg (a scan of the cut's snapshot) or ``deltalake`` (the cut's
    version). Reads the whole table into memory: for inspection and small tables.

    Raises:
        UserInputError: no such table, or no such cut.
    """
    import pyarrow as pa

    pipeline = open_pipeline(spec_path)
    stages = table_stages(pipeline)
    stage_name, _, sink_name = table.partition("/")
    stage = stages.get(stage_name)
    sink = next((s for s in table_sinks(stage) if s.name == sink_name), None) if stage is not None else None
    if stage is None or sink is None:
        raise UserInputError(f"no table {table!r} in pipeline {pipeline.spec.name!r}; its tables: "
                             + ", ".join(f"{n}/{s.name}" for n, st in stages.items() for s in table_sinks(st)))
    version = cut_tables(spec_path, checkpoint_id)[table]
    if isinstance(sink, IcebergSinkSpec):
        from barrierflow.sinks.iceberg import open_catalog

        loaded = open_catalog(sink.catalog, stage.layout.work_dir).load_table(sink.table)
        if version is None or version.version is None:
            return loaded.schema().as_arrow().empty_table()
        return loaded.scan(snapshot_id=version.version).to_arrow()
    from deltalake import DeltaTable

    from barrierflow.sinks.delta import table_uri

    if version is None or version.version is None:
        return pa.table({})
    return DeltaTable(table_uri(sink.path), version=version.version).to_pyarrow_table()
