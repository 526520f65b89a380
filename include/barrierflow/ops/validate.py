"""Validate a spec, single- or multi-stage, and describe it (``barrierflow validate``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from barrierflow.pipeline.spec_summary import SpecSummary, summarize
from barrierflow.spec.loader import load_any_spec

if TYPE_CHECKING:
    from barrierflow.pipeline.model import OpenedPipeline

__all__ = ["SpecSummary", "StageShape", "validate_deep", "validate_spec"]


def validate_spec(spec_path: str | os.PathLike[str]) -> SpecSummary:
    """Load the spec at ``spec_path`` (raises SpecError naming every problem) and summarise it
    (:func:`barrierflow.pipeline.spec_summary.summarize`)."""
    return summarize(load_any_spec(spec_path))


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
                prefix=pipeline.stage_field_prefix(index), stage=stage.name,
                channel_key_column=stage.output.key_column if stage.output is not None else None)
            shapes.append(StageShape(stage.name, shape.input_columns, shape.output_columns))
    _check_channel_fields(pipeline, path, {s.stage: s for s in shapes})
    return summary, shapes


def _check_channel_fields(pipeline: OpenedPipeline, spec_path: str, shapes: dict[str, StageShape]) -> None:
    """Each channel source's ``json_fields`` are columns of the stage that writes the channel
    (a missing one would make every record a dead letter). One stage reads no channel."""
    from barrierflow.errors import SpecError
    from barrierflow.spec.parts import spec_parts
    from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec

    parts = spec_parts(pipeline.spec)
    writers = {p.part.sinks[0].channel: p.name for p in parts if isinstance(p.part.sinks[0], ChannelSinkSpec)}
    for index, part in enumerate(parts):
        for number, source in enumerate(part.part.sources):
            if not isinstance(source, ChannelSourceSpec) or source.channel not in writers:
                continue
            writer = shapes[writers[source.channel]]
            missing = [name for name in source.json_fields if name not in writer.output_columns]
            if missing:
                listing = ", ".join(f"{n} {t}" for n, t in writer.output_columns.items())
                raise SpecError(spec_path, [(f"{pipeline.stage_field_prefix(index)}sources[{number}].json_fields", (
                    f"stage {part.name!r} reads fields {missing} from channel {source.channel!r}, but stage "
                    f"{writer.stage!r} writes only the columns {listing}; every record would be a dead letter"))])
