"""The committed output of a table sink (Iceberg, Delta) as the batch side reads it: the table
as of one cut, never its latest state.

A cut record (:mod:`barrierflow.sinks.cut`) names, per completed checkpoint n, the table version
(Iceberg snapshot id, Delta version) that holds exactly the output up to n. The batch side
(rollups, the stream-vs-batch comparison, data quality) reads the data files of that version,
listed by the table format's own client (a pyiceberg scan plan of the snapshot, ``deltalake``'s
file list of the version), and hands them to Spark as plain Parquet files: there is no Iceberg
runtime for Spark 4.2, and the sinks only ever append whole files that carry every column, the
partition columns included. A commit another writer makes after the cut (an update, a
compaction) is not seen through the cut; it is seen through the first cut after it.

A checkpoint whose epochs are held (``commit_every`` above 1) has no cut record, so the newest
cut is always a checkpoint whose output the tables hold in full; a cut of a checkpoint in which
a table got no rows names that table's previous version (the last one committed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.errors import UserInputError
from barrierflow.pipeline.final_stages import lake_of
from barrierflow.sinks.cut import CutLog, TableVersion
from barrierflow.sinks.parquet import rollups_beside, rollups_uri
from barrierflow.sinks.table import PROP_CHECKPOINT, PROP_PIPELINE, PROP_SINK, PROP_STAGE
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.spec.models import ParquetSinkSpec

if TYPE_CHECKING:
    from barrierflow.checkpointing.manifest import Manifest
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.pipeline.model import OpenedPipeline, Stage
    from barrierflow.spec.models import StageSpec

TableSinkSpec = IcebergSinkSpec | DeltaSinkSpec


def table_sinks(spec: StageSpec) -> list[TableSinkSpec]:
    """Every Iceberg and Delta sink of the stage whose spec is ``spec``, in the spec's order."""
    return [s for s in spec.sinks if isinstance(s, IcebergSinkSpec | DeltaSinkSpec)]


def table_stages(pipeline: OpenedPipeline) -> dict[str, Stage]:
    """The stages of ``pipeline`` that write an Iceberg or Delta table, by name.

    Raises:
        UserInputError: it writes none.
    """
    stages = {s.name: s for s in pipeline.stages if table_sinks(s.spec)}
    if not stages:
        raise UserInputError(f"pipeline {pipeline.spec.name!r} writes no Iceberg or Delta table (sink type 'iceberg' "
                             "or 'delta'); cuts of tables exist only for those")
    return stages


def table_sink(spec: StageSpec) -> TableSinkSpec | None:
    """The sink the batch side reads (:func:`lake_sink`) when it is an Iceberg or Delta table,
    else None."""
    sink = lake_of(spec.sinks)
    return sink if isinstance(sink, IcebergSinkSpec | DeltaSinkSpec) else None


def describe(sink: TableSinkSpec) -> str:
    """The table as messages name it."""
    return f"iceberg table {sink.table}" if isinstance(sink, IcebergSinkSpec) else f"delta table {sink.path}"


@dataclass(frozen=True)
class CutOutput:
    """What the batch side reads of a table sink: the cut of ``checkpoint_id``, the sink's table
    ``version`` in it (None: nothing committed yet) and the storage URIs of that version's data
    files (``files``)."""

    checkpoint_id: int
    version: TableVersion | None
    files: list[str]

    @property
    def table_version(self) -> int | None:
        return None if self.version is None else self.version.version


def _uri(path: str) -> str:
    return f"file://{path}" if path.startswith("/") else path


def _work_dir(spec: StageSpec) -> Any:
    from barrierflow.workdir.layout import JobLayout

    return JobLayout.for_spec(spec).work_dir


def _iceberg(spec: StageSpec, sink: IcebergSinkSpec) -> Any:
    from barrierflow.sinks.iceberg import open_catalog

    return open_catalog(sink.catalog, _work_dir(spec)).load_table(sink.table)


def table_files(spec: StageSpec, version: int | None) -> list[str]:
    """The data files (storage URIs, sorted) of version ``version`` (Iceberg snapshot id, Delta
    version; None: no file) of the spec's table."""
    sink = table_sink(spec)
    assert sink is not None
    if version is None:
        return []
    if isinstance(sink, IcebergSinkSpec):
        return sorted(_uri(task.file.file_path) for task in _iceberg(spec, sink).scan(snapshot_id=version).plan_files())
    from deltalake import DeltaTable

    from barrierflow.sinks.delta import table_uri

    return sorted(_uri(f) for f in DeltaTable(table_uri(sink.path), version=version).file_uris())


def cut_checkpoints(store: CheckpointStore, sink: TableSinkSpec) -> list[int]:
    """The checkpoint ids whose cut record in ``store`` lists ``sink``, ascending."""
    return CutLog(store.objects).checkpoints([sink.name])


def cut_output(spec: StageSpec, store: CheckpointStore, checkpoint_id: int | None = None) -> CutOutput:
    """The spec's table as of the cut of ``checkpoint_id`` (None: the newest cut).

    Raises:
        UserInputError: no cut record (yet, or of that checkpoint), naming the ones there are.
    """
    sink = table_sink(spec)
    assert sink is not None
    log = CutLog(store.objects)
    available = log.checkpoints([sink.name])
    if checkpoint_id is None:
        if not available:
            raise UserInputError(
                f"pipeline {spec.name!r}: no cut record yet, so no checkpoint's output is in {describe(sink)} as a "
                "whole: run the pipeline until a checkpoint completes and commits its table")
        checkpoint_id = available[-1]
    tables = log.get(checkpoint_id)
    if tables is None or sink.name not in tables:
        raise UserInputError(f"pipeline {spec.name!r}: checkpoint {checkpoint_id} has no cut record of sink "
                             f"{sink.name!r}; checkpoints with one: {', '.join(map(str, available[-10:])) or 'none'}")
    version = tables[sink.name]
    return CutOutput(checkpoint_id, version, table_files(spec, None if version is None else version.version))


def trusted_cut(spec: StageSpec, store: CheckpointStore) -> tuple[Manifest, CutOutput]:
    """The newest completed checkpoint that has a cut record (its output is in the table as a
    whole) and the table as of that cut.

    Raises:
        UserInputError: no completed checkpoint has a cut record.
    """
    sink = table_sink(spec)
    assert sink is not None
    cuts = set(cut_checkpoints(store, sink))
    for manifest in reversed(store.completed()):
        if manifest.checkpoint_id in cuts:
            return manifest, cut_output(spec, store, manifest.checkpoint_id)
    raise UserInputError(
        f"pipeline {spec.name!r} has no completed checkpoint with a cut record of {describe(sink)}: run the pipeline "
        "until a checkpoint completes and its table commit is recorded (or finish in-doubt commits: "
        "'barrierflow reconcile SPEC')")


def ours(spec: StageSpec, sink: TableSinkSpec, properties: dict[str, Any]) -> int | None:
    """The checkpoint id a table commit's ``properties`` (Iceberg snapshot summary, Delta commit
    info) record when the spec's stage and sink made it (as the sink's restore rule reads it);
    else None."""
    from barrierflow.sinks.factory import pipeline_and_stage

    pipeline, stage = pipeline_and_stage(spec)
    checkpoint = str(properties.get(PROP_CHECKPOINT, ""))
    if (properties.get(PROP_PIPELINE) == pipeline and properties.get(PROP_STAGE) == stage
            and properties.get(PROP_SINK) == sink.name and checkpoint.isdigit()):
        return int(checkpoint)
    return None


def newest_commits(spec: StageSpec, version: int | None, count: int) -> tuple[list[int], int | None]:
    """The checkpoint ids of the newest ``count`` commits of the spec's sink at or before table
    version ``version`` (oldest first), and the table version just before the oldest of them
    (None: the table's beginning). The rows those commits added are the files of ``version``
    that the version before them lacks (a compaction in between makes that more files, never fewer)."""
    sink = table_sink(spec)
    assert sink is not None
    found: list[tuple[int, int | None]] = []  # (checkpoint id, the version before that commit)
    if version is None:
        return [], None
    if isinstance(sink, IcebergSinkSpec):
        from pyiceberg.table.snapshots import ancestors_of

        table = _iceberg(spec, sink)
        for snapshot in ancestors_of(table.metadata.snapshot_by_id(version), table.metadata):
            cid = ours(spec, sink, snapshot.summary.additional_properties if snapshot.summary else {})
            if cid is not None:
                found.append((cid, snapshot.parent_snapshot_id))
                if len(found) == count:
                    break
    else:
        from deltalake import DeltaTable

        from barrierflow.sinks.delta import table_uri

        for info in DeltaTable(table_uri(sink.path), version=version).history():  # newest first
            cid = ours(spec, sink, info)
            if cid is not None and 0 <= int(info["version"]) <= version:
                number = int(info["version"])
                found.append((cid, number - 1 if number > 0 else None))
                if len(found) == count:
                    break
    if not found:
        return [], version
    return sorted(cid for cid, _ in found), found[-1][1]


def lake_sink(spec: StageSpec) -> ParquetSinkSpec | TableSinkSpec:
    """The spec's committed lake the batch side reads: its first Parquet sink, else its first
    Iceberg or Delta table (:func:`~barrierflow.pipeline.final_stages.lake_of`). Raises
    UserInputError naming the sink types and the fix."""
    sink = lake_of(spec.sinks)
    if sink is None:
        kinds = " and a ".join(repr(s.type) for s in spec.sinks)
        raise UserInputError(
            f"pipeline {spec.name!r} writes to a {kinds} sink: the batch side (rollups, the stream-vs-batch "
            "comparison, data quality of the output) reads a Parquet lake; give the pipeline a 'type: parquet' sink "
            "(or an Iceberg or Delta table: 'type: iceberg', 'type: delta')")
    return sink


def lake_rollups_uri(spec: StageSpec) -> str:
    """Where the daily rollups go: ``batch.rollups``, else ``rollups`` beside the Parquet sink's
    folder or the table's location (an Iceberg table's as its catalog says, or where the sink
    creates it)."""
    sink = lake_sink(spec)
    if spec.batch.rollups or isinstance(sink, ParquetSinkSpec):
        return rollups_uri(spec)
    if isinstance(sink, DeltaSinkSpec):
        return rollups_beside(sink.path)
    from barrierflow.sinks.iceberg import table_location

    return rollups_beside(table_location(sink, _work_dir(spec)))


def files_added(spec: StageSpec, version: int | None, since: int | None) -> list[str] | None:
    """The data files of table version ``version`` that version ``since`` lacks (``since`` None:
    all of them); None when version ``since`` cannot be read any more (expired by maintenance)."""
    try:
        before = set(table_files(spec, since))
    except Exception:
        return None
    return [f for f in table_files(spec, version) if f not in before]
