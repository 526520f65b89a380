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
from barrierflow.pipeline.model import open_pipeline
from barrierflow.pipeline.table_output import table_stages
from barrierflow.sinks.cut import CutLog, TableVersion, tables_as_of
from barrierflow.spec.lakehouse import IcebergSinkSpec

if TYPE_CHECKING:
    import pyarrow as pa


def cut_tables(spec_path: str | os.PathLike[str], checkpoint_id: int | None = None) -> dict[str, TableVersion | None]:
    """Every table of the pipeline at ``spec_path`` as of the cut of ``checkpoint_id`` (None:
    the newest cut); keys ``<stage>/<sink>``, values None for a table with nothing committed.

    Raises:
        UserInputError: the pipeline writes no table, or the checkpoint has no cut record.
    """
    pipeline = open_pipeline(spec_path)
    stores = {name: stage.store.objects for name, stage in table_stages(pipeline).items()}
    return tables_as_of(stores, checkpoint_id)


def newest_cut(spec_path: str | os.PathLike[str]) -> int:
    """The newest checkpoint id every table stage of the pipeline has a cut record of.

    Raises:
        UserInputError: the pipeline writes no table, or no cut is recorded yet.
    """
    pipeline = open_pipeline(spec_path)
    ids = [set(CutLog(stage.store.objects).checkpoints()) for stage in table_stages(pipeline).values()]
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
    if stage is None or stage.spec.sink.name != sink_name:
        raise UserInputError(f"no table {table!r} in pipeline {pipeline.spec.name!r}; its tables: "
                             + ", ".join(f"{n}/{s.spec.sink.name}" for n, s in stages.items()))
    version = cut_tables(spec_path, checkpoint_id)[table]
    sink = stage.spec.sink
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
