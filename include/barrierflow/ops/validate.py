"""Validate a spec, single- or multi-stage, and describe it (``barrierflow validate``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from barrierflow.spec.graph import Cycle, Edge, build_graph
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.stages import StagedPipelineSpec


@dataclass(frozen=True)
class SpecSummary:
    """What a valid spec describes. A single-stage spec has one stage named after the
    pipeline and no channels."""

    pipeline: str
    stages: tuple[str, ...]
    channels: dict[str, str] = field(default_factory=dict)
    edges: tuple[Edge, ...] = ()
    cycles: tuple[Cycle, ...] = ()
    source_stages: tuple[str, ...] = ()
    final_stages: tuple[str, ...] = ()
    mode: str = "aligned"
    alignment_timeout: float = 0.0

    @property
    def multi_stage(self) -> bool:
        return bool(self.channels)


def validate_spec(spec_path: str | os.PathLike[str]) -> SpecSummary:
    """Load the spec at ``spec_path`` (raises SpecError naming every problem) and summarise it."""
    spec = load_any_spec(spec_path)
    mode, timeout = spec.checkpoint.mode.value, spec.checkpoint.alignment_timeout
    if not isinstance(spec, StagedPipelineSpec):
        return SpecSummary(spec.name, (spec.name,), source_stages=(spec.name,), final_stages=(spec.name,),
                           mode=mode, alignment_timeout=timeout)
    graph, _problems = build_graph(spec)
    assert graph is not None  # the loader raised otherwise
    return SpecSummary(
        pipeline=spec.name,
        stages=graph.stages,
        channels={c.name: c.topic_for(spec.name) for c in spec.channels},
        edges=graph.edges,
        cycles=graph.cycles,
        source_stages=graph.source_stages,
        final_stages=graph.final_stages,
        mode=mode,
        alignment_timeout=timeout,
    )


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
    connects to no broker or database; a single-stage spec is one stage named after it.

    Raises:
        SpecError: the first problem, naming the spec field (``stages[i].`` for a stage).
        UserInputError: a stage cannot be derived (see ``derive_stage_spec``).
    """
    import tempfile

    from barrierflow.pipeline.model import OFFLINE_SERVERS, pipeline_work_dir
    from barrierflow.pipeline.stage_options import derive_stage_spec
    from barrierflow.runtime.session import build_session
    from barrierflow.runtime.transform_check import check_transformation
    from barrierflow.spec.models import SparkSpec
    from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec

    summary = validate_spec(spec_path)
    spec = load_any_spec(spec_path)
    path = str(spec_path)
    # a small local session; the spec's own py_packages, so the functions import as in a run
    spark = build_session(SparkSpec(master="local[1]", shuffle_partitions=1, py_packages=spec.spark.py_packages),
                          app_name="barrierflow-validate")
    shapes: list[StageShape] = []
    with tempfile.TemporaryDirectory(prefix="barrierflow-validate-") as scratch:
        if not isinstance(spec, StagedPipelineSpec):
            shape = check_transformation(spark, spec, spec_path=path, source_type=spec.source.type,
                                         scratch_dir=scratch)
            return summary, [StageShape(shape.stage, shape.input_columns, shape.output_columns)]
        servers = {c.name: OFFLINE_SERVERS for c in spec.channels}
        work_dir = pipeline_work_dir(spec)
        for index, stage in enumerate(spec.stages):
            derived = derive_stage_spec(spec, stage, work_dir=work_dir, servers=servers)
            sink = stage.sinks[0]
            channels_read = any(isinstance(s, ChannelSourceSpec) for s in stage.sources)
            shape = check_transformation(
                spark, derived, spec_path=path, source_type="channel" if channels_read else derived.source.type,
                scratch_dir=scratch, prefix=f"stages[{index}].", stage=stage.name,
                channel_key_column=sink.key_column if isinstance(sink, ChannelSinkSpec) else None)
            shapes.append(StageShape(stage.name, shape.input_columns, shape.output_columns))
    _check_channel_fields(spec, path, {s.stage: s for s in shapes})
    return summary, shapes


def _check_channel_fields(spec: StagedPipelineSpec, spec_path: str, shapes: dict[str, StageShape]) -> None:
    """Each channel source's ``json_fields`` are columns of the stage that writes the channel
    (a missing one would make every record a dead letter)."""
    from barrierflow.errors import SpecError
    from barrierflow.spec.stages import ChannelSinkSpec, ChannelSourceSpec

    writers = {s.sinks[0].channel: s.name for s in spec.stages if isinstance(s.sinks[0], ChannelSinkSpec)}
    for index, stage in enumerate(spec.stages):
        for number, source in enumerate(stage.sources):
            if not isinstance(source, ChannelSourceSpec) or source.channel not in writers:
                continue
            writer = shapes[writers[source.channel]]
            missing = [name for name in source.json_fields if name not in writer.output_columns]
            if missing:
                listing = ", ".join(f"{n} {t}" for n, t in writer.output_columns.items())
                raise SpecError(spec_path, [(f"stages[{index}].sources[{number}].json_fields", (
                    f"stage {stage.name!r} reads fields {missing} from channel {source.channel!r}, but stage "
                    f"{writer.stage!r} writes only the columns {listing}; every record would be a dead letter"))])
