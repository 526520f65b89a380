"""Validate a spec, single- or multi-stage, and describe it (``barrierflow validate``)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SpecError
from barrierflow.pipeline.layout import cut_layout
from barrierflow.pipeline.spec_summary import SpecSummary, summarize
from barrierflow.pipeline.words import WORDS, words
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.sink_set import several_sinks_problem
from barrierflow.spec.stages import PipelineSpec

if TYPE_CHECKING:
    from barrierflow.pipeline.model import OpenedPipeline

__all__ = ["SpecSummary", "StageShape", "Validation", "malformed_warnings", "state_store_warnings", "validate",
           "validate_deep", "validate_spec"]

#: Spark's conf key naming the state store provider class (``spark.conf`` may set it directly).
_PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def validate_spec(spec_path: str | os.PathLike[str]) -> SpecSummary:
    """Load the spec at ``spec_path``, import every stage's transformation and summarise it
    (:func:`barrierflow.pipeline.spec_summary.summarize`, with ``warnings`` from
    :func:`state_store_warnings` and :func:`malformed_warnings`). Starts no Spark: the import is
    :func:`barrierflow.transforms.context.import_transformation` (module, callable, a
    two-parameter signature), with the directories of ``spark.py_packages`` on ``sys.path`` as
    a run's shipped zips put them.

    Raises:
        SpecError: naming every problem of the spec's fields; else the first transformation
            that does not import (``transformation.function``, ``stages[i].`` for a stage of
            several) and the fix.
        UserInputError: an entry of ``spark.py_packages`` is not a package directory.
    """
    spec = load_any_spec(spec_path)
    _check_sinks(spec, str(spec_path))
    _check_imports(spec, str(spec_path))
    return dataclasses.replace(summarize(spec), warnings=(*state_store_warnings(spec), *malformed_warnings(spec)))


def _check_sinks(spec: PipelineSpec, spec_path: str) -> None:
    """Refuse the stages whose sinks cannot be written together
    (:func:`~barrierflow.spec.sink_set.several_sinks_problem`; a run refuses them too, when it
    derives the stage), naming each such stage's ``sinks`` field."""
    said = WORDS[cut_layout(spec).name]
    problems = [(f"{said.stage_field_prefix(index)}sinks", problem) for index, stage in enumerate(spec.stages)
                if (problem := several_sinks_problem(f"stage {stage.name!r}", list(stage.sinks)))]
    if problems:
        raise SpecError(spec_path, problems)


def _check_imports(spec: PipelineSpec, spec_path: str) -> None:
    from barrierflow.transforms.context import import_transformation

    said = WORDS[cut_layout(spec).name]
    with _py_packages_on_path(spec.spark.py_packages):
        for index, stage in enumerate(spec.stages):
            prefix = said.stage_field_prefix(index)
            where = f"{said.label(stage.name)}: " if prefix else ""  # a single-stage spec's fields are its own
            try:
                import_transformation(stage.transformation.function, spec_path, f"{prefix}transformation.function")
            except SpecError as exc:
                raise SpecError(spec_path, [(f, f"{where}{m}") for f, m in exc.problems]) from None


@contextlib.contextmanager
def _py_packages_on_path(entries: list[str]) -> Iterator[None]:
    """The folders holding the packages of ``spark.py_packages`` first on ``sys.path`` for the
    block (a run's driver imports them from their zips, put first the same way)."""
    from barrierflow.spark.user_code import package_dir

    folders = [str(package_dir(entry).parent) for entry in entries]
    before = list(sys.path)
    sys.path[:0] = folders
    try:
        yield
    finally:
        sys.path[:] = before


def _keeps_state(part: Any, spec: PipelineSpec) -> str | None:
    """Why a stage keeps state, as far as its spec tells without Spark, or None."""
    mode = part.transformation.output_mode
    if mode != "append":
        return f"output_mode {mode}: a running aggregation"
    if spec.event_time is not None:
        return "event_time: a watermark is for windows, deduplication or joins, which keep state"
    return None


def state_store_warnings(spec: PipelineSpec) -> list[str]:
    """A warning when a stage keeps state (output mode ``update``/``complete``, or an
    ``event_time`` watermark) on the HDFS-backed state store (``spark.state_store: hdfs``, the
    default, and no provider class in ``spark.conf``): that state can never be rescaled (a
    rescale rewrites RocksDB state only), and the store cannot be changed over existing state
    (Spark keeps a checkpoint's provider). Empty otherwise. Not an error: the pipeline runs."""
    if spec.spark.state_store != "hdfs" or "RocksDB" in spec.spark.conf.get(_PROVIDER_KEY, ""):
        return []
    said = WORDS[cut_layout(spec).name]
    stateful = [(said.label(s.name), why) for s in spec.stages if (why := _keeps_state(s, spec)) is not None]
    if not stateful:
        return []
    which = "; ".join(f"{label} ({why})" for label, why in stateful)
    return [f"spark.state_store: hdfs (the default) keeps the state of {which}. State on the HDFS-backed store can "
            "never be rescaled (its shuffle partitions never change), and the state store cannot be changed once "
            "state exists (Spark keeps the provider a checkpoint was created with). Set 'spark.state_store: "
            "rocksdb' now, before the first run"]


@dataclass(frozen=True)
class StageShape:
    """One stage's transformation as ``validate --deep`` saw it: column name -> Spark type."""

    stage: str
    input_columns: dict[str, str]
    output_columns: dict[str, str]


def validate_deep(spec_path: str | os.PathLike[str]) -> tuple[SpecSummary, list[StageShape]]:
    """:func:`validate_spec`, then every stage's transformation checked in a local Spark session
    (:func:`barrierflow.runtime.transform_check.check_transformation`: imported, called on an
    empty streaming input with its source's columns (``spark.py_packages`` shipped first, as a run
    does), its result checked by Spark's analysis of
    streaming plans for the output mode), in spec order; for several stages also that each
    channel's ``json_fields`` are among the columns of the stage writing it. Reads no data and
    connects to no broker or database; a single-stage spec is one stage named after it (the
    stages are the opened pipeline's, :func:`barrierflow.pipeline.model.open_pipeline`).

    Raises:
        SpecError: the first problem, naming the spec field (``stages[i].`` for a stage of several).
        UserInputError: a stage cannot be derived (see ``derive_stage_spec``).
    """
    import tempfile

    from barrierflow.pipeline.model import open_pipeline
    from barrierflow.runtime.session import build_session
    from barrierflow.runtime.transform_check import check_transformation
    from barrierflow.spec.models import SparkSpec

    summary = validate_spec(spec_path)
    pipeline = open_pipeline(spec_path)
    path = str(spec_path)
    # a small local session; the spec's own py_packages, so the functions import as in a run
    spark = build_session(SparkSpec(master="local[1]", shuffle_partitions=1,
                                    py_packages=pipeline.spec.spark.py_packages), app_name="barrierflow-validate")
    shapes: list[StageShape] = []
    with tempfile.TemporaryDirectory(prefix="barrierflow-validate-") as scratch:
        for index, stage in enumerate(pipeline.stages):
            shape = check_transformation(
                spark, stage.spec, spec_path=path, source_type=stage.source_type, scratch_dir=scratch,
                prefix=words(pipeline).stage_field_prefix(index), stage=stage.name,
                channel_key_column=stage.output.key_column if stage.output is not None else None)
            shapes.append(StageShape(stage.name, shape.input_columns, shape.output_columns))
    _check_channel_fields(pipeline, path, {s.stage: s for s in shapes})
    return summary, shapes


def _check_channel_fields(pipeline: OpenedPipeline, spec_path: str, shapes: dict[str, StageShape]) -> None:
    """Each channel source's ``json_fields`` are columns of the stage that writes the channel
    (a missing one would make every record a dead letter). One stage reads no channel."""
    from barrierflow.errors import SpecError
    from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec

    parts = pipeline.spec.stages
    writers = {p.sinks[0].channel: p.name for p in parts if isinstance(p.sinks[0], ChannelSinkSpec)}
    for index, part in enumerate(parts):
        for number, source in enumerate(part.sources):
            if not isinstance(source, ChannelSourceSpec) or source.channel not in writers:
                continue
            writer = shapes[writers[source.channel]]
            missing = [name for name in source.json_fields if name not in writer.output_columns]
            if missing:
                listing = ", ".join(f"{n} {t}" for n, t in writer.output_columns.items())
                field = f"{words(pipeline).stage_field_prefix(index)}sources[{number}].json_fields"
                raise SpecError(spec_path, [(field, (
                    f"stage {part.name!r} reads fields {missing} from channel {source.channel!r}, but stage "
                    f"{writer.stage!r} writes only the columns {listing}; every record would be a dead letter"))])


def malformed_warnings(spec: PipelineSpec) -> list[str]:
    """A warning for each JSON Kafka source read by Spark's connector (``reader: spark``) that
    turns malformed records into rows of nulls without saying so (``malformed`` not set), where
    barrierflow's reader writes them to the dead-letter output. Not an error: the pipeline runs."""
    from barrierflow.spec.models import KafkaSourceSpec

    found = []
    said = WORDS[cut_layout(spec).name]
    for stage in spec.stages:
        for source in stage.sources:
            if isinstance(source, KafkaSourceSpec) and source.format == "json" and source.reader == "spark" \
                    and source.malformed is None:
                found.append(
                    f"{said.label(stage.name)}: Kafka source {source.name!r} (reader: spark) turns malformed records "
                    "(not a JSON object; a field missing, null or of the wrong type) into rows of nulls, silently, "
                    "where reader: python writes them to the dead-letter output. Set 'malformed: dead_letter' on the "
                    "source before its first run (the connector then reads each batch twice; a pipeline with state "
                    "cannot switch later), or 'malformed: nulls' to keep the null rows and silence this warning")
    return found


@dataclass(frozen=True)
class Validation:
    """What ``barrierflow validate`` found: the spec's summary and, with ``--deep``, every
    stage's transformation as checked (None without)."""

    summary: SpecSummary
    shapes: list[StageShape] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``validate --json``: the graph (stages, channels, edges, cycles with their
        back-edge, source and final stages), the checkpoint mode, the warnings and, with
        ``--deep``, ``transformations`` (each stage's input and output columns)."""
        summary = self.summary
        return {
            "pipeline": summary.pipeline, "stages": list(summary.stages), "channels": summary.channels,
            "edges": [{"channel": e.channel, "writer": e.writer, "reader": e.reader} for e in summary.edges],
            "cycles": [{"stages": list(c.stages), "back_edge": {"channel": c.back_edge.channel,
                                                                "writer": c.back_edge.writer,
                                                                "reader": c.back_edge.reader}}
                       for c in summary.cycles],
            "source_stages": list(summary.source_stages), "final_stages": list(summary.final_stages),
            "mode": summary.mode, "alignment_timeout": summary.alignment_timeout, "warnings": list(summary.warnings),
            **({"transformations": [{"stage": s.stage, "input": s.input_columns, "output": s.output_columns}
                                    for s in self.shapes]} if self.shapes is not None else {})}


def validate(spec_path: str | os.PathLike[str], *, deep: bool = False) -> Validation:
    """:func:`validate_spec`, or with ``deep`` :func:`validate_deep` (same errors)."""
    if deep:
        return Validation(*validate_deep(spec_path))
    return Validation(validate_spec(spec_path))
