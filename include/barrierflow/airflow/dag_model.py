"""What the DAGs of one discovered pipeline are built from, read from its spec at parse time.

:func:`pipeline_dags_model` turns a :class:`~barrierflow.ops.discovery.DiscoveredPipeline` that
loaded into a :class:`Pipeline`: its spec path, its checkpoints asset and its committed lakes
(:class:`Output`: the Parquet, Iceberg or Delta sink of a single-stage pipeline, or each final
stage with one of a pipeline of several), each with its output asset. It reads nothing but the
spec (no database, no connection, no Spark).

:class:`DagKind` and :class:`BatchDagKind` are the rows of the DAG file's tables of DAG kinds
(``DAG_KINDS``, made per pipeline; ``BATCH_DAG_KINDS``, made per :class:`Output`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, Param

from barrierflow.airflow.assets import pipeline_asset, storage_asset_uri
from barrierflow.airflow.dag_ids import dag_id_for
from barrierflow.ops.discovery import DiscoveredPipeline
from barrierflow.pipeline.final_stages import lake_outputs
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from barrierflow.spec.stages import PipelineSpec


@dataclass(frozen=True)
class Output:
    """A committed Parquet lake of a pipeline and its asset: the sink of a single-stage pipeline
    (``stage`` None), or that of a final stage of several. Its batch DAGs work on it."""

    stage: str | None
    asset: Asset
    #: Whether its output can be recomputed in batch (not downstream of a cycle or of a stage whose
    #: output mode is not append: `barrierflow.pipeline.final_stages.replay_obstacle`).
    recomputable: bool = True

    def dag_id(self, pipeline: Pipeline, kind: str) -> str:
        """``barrierflow_<kind>__<pipeline>``, with ``__<stage>`` for a final stage."""
        return pipeline.dag_id(kind) + (f"__{self.stage}" if self.stage else "")

    def submit_args(self) -> list[str]:
        """The batch job's ``--stage`` argument for a final stage (none for a single stage)."""
        return ["--stage", self.stage] if self.stage else []

    def summary(self, pipeline: Pipeline) -> str:
        """What the batch DAGs' descriptions call it."""
        return f"the committed output of {pipeline.summary}" + (f", final stage {self.stage!r}" if self.stage else "")


@dataclass(frozen=True)
class Pipeline:
    """What the DAGs of one pipeline are built from."""

    entry: DiscoveredPipeline
    spec_path: str
    checkpoints: Asset
    outputs: tuple[Output, ...]  # none: no Parquet sink (single stage) or no final Parquet stage
    #: ``barrierflow/<name>/tables``: one event per cut of its Iceberg and Delta tables, carrying
    #: every table's version (None: the pipeline writes no table); :mod:`barrierflow.airflow.assets`
    tables: Asset | None = None

    @property
    def spec(self) -> PipelineSpec:
        assert self.entry.spec is not None
        return self.entry.spec

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def summary(self) -> str:
        return f"barrierflow pipeline {self.name!r} ({self.spec_path})"

    def dag_id(self, kind: str) -> str:
        return dag_id_for(self.name, kind)

    @property
    def writes_tables(self) -> bool:
        """Whether a stage writes an Iceberg or Delta table (the table maintenance DAG applies)."""
        return any(isinstance(sink, IcebergSinkSpec | DeltaSinkSpec) for stage in self.spec.stages
                   for sink in stage.sinks)

    @property
    def wants_chaos_dag(self) -> bool:
        """Whether the spec opts into the chaos DAG (``chaos.dag: true``; its scratch servers are
        checked when the spec loads)."""
        return self.spec.chaos is not None and self.spec.chaos.dag


def _storage_asset_uri(uri: str, barrierflow_home: str) -> str:
    """The asset URI of a storage URI; a relative ``file://`` path resolves under ``barrierflow_home``."""
    if uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
        return storage_asset_uri(uri, str(path if path.is_absolute() else Path(barrierflow_home) / path))
    return storage_asset_uri(uri)


def pipeline_dags_model(entry: DiscoveredPipeline, *, barrierflow_home: str, poll_seconds: float) -> Pipeline:
    """The :class:`Pipeline` of ``entry`` (a spec that loaded). Its assets are watched in the
    triggerer every ``poll_seconds`` (:mod:`barrierflow.airflow.assets`); relative paths in the
    spec resolve under ``barrierflow_home``."""
    assert entry.spec is not None
    spec_path = str(entry.path.resolve())
    watch = {"spec_path": spec_path, "barrierflow_home": barrierflow_home, "poll_seconds": poll_seconds}
    checkpoints = pipeline_asset(entry.name, "checkpoints",
                                 _storage_asset_uri(entry.spec.checkpoint.storage, barrierflow_home), **watch)
    spec = entry.spec
    outputs: list[Output] = []
    for lake in lake_outputs(spec):
        asset = pipeline_asset(entry.name, "output", _storage_asset_uri(lake.uri, barrierflow_home),
                               stage=lake.stage, min_interval_seconds=lake.output_event_interval, **watch)
        outputs.append(Output(lake.stage, asset, recomputable=lake.recomputable))
    tables = None
    if any(isinstance(sink, IcebergSinkSpec | DeltaSinkSpec) for stage in spec.stages for sink in stage.sinks):
        cuts_uri = _storage_asset_uri(spec.checkpoint.storage, barrierflow_home).rstrip("/") + "/cuts"
        tables = pipeline_asset(entry.name, "tables", cuts_uri, **watch)
    return Pipeline(entry, spec_path, checkpoints, tuple(outputs), tables)


@dataclass(frozen=True)
class DagKind:
    """One kind of DAG made per pipeline: its id part, description, schedule, params, extra tags,
    tasks (``body``, called inside the DAG) and whether the pipeline gets it (``applies``)."""

    kind: str
    description: Callable[[Pipeline], str]
    schedule: Callable[[Pipeline], Any]
    body: Callable[[Pipeline], None]
    params: Callable[[Pipeline], dict[str, Param]] = lambda p: {}
    tags: tuple[str, ...] = ()
    applies: Callable[[Pipeline], bool] = lambda p: True


@dataclass(frozen=True)
class BatchDagKind:
    """One kind of batch DAG, made per committed Parquet lake (:class:`Output`) of a pipeline:
    a single-stage pipeline's sink, or each final stage with a Parquet sink of several."""

    kind: str
    description: Callable[[Pipeline, Output], str]
    schedule: Callable[[Pipeline, Output], Any]
    body: Callable[[Pipeline, Output], None]
    params: Callable[[Pipeline], dict[str, Param]]
    tags: tuple[str, ...]
    applies: Callable[[Output], bool] = lambda o: True
