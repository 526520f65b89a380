"""Pipeline specs: typed models, the multi-stage graph and the YAML loader."""

from barrierflow.spec.graph import Cycle, Edge, StageGraph, build_graph
from barrierflow.spec.loader import (
    load_any_spec,
    load_spec,
    parse_any_spec,
    parse_spec,
    parse_staged_spec,
    project_home,
    spec_home,
)
from barrierflow.spec.models import (
    CheckpointSpec,
    DiscardSinkSpec,
    GeneratorSourceSpec,
    KafkaSourceSpec,
    ParquetSinkSpec,
    PipelineSpec,
)
from barrierflow.spec.stages import (
    ChannelSinkSpec,
    ChannelSourceSpec,
    ChannelSpec,
    StagedPipelineSpec,
    StageSpec,
)

__all__ = [
    "ChannelSinkSpec",
    "ChannelSourceSpec",
    "ChannelSpec",
    "CheckpointSpec",
    "Cycle",
    "DiscardSinkSpec",
    "Edge",
    "GeneratorSourceSpec",
    "KafkaSourceSpec",
    "ParquetSinkSpec",
    "PipelineSpec",
    "StageGraph",
    "StageSpec",
    "StagedPipelineSpec",
    "build_graph",
    "load_any_spec",
    "load_spec",
    "parse_any_spec",
    "parse_spec",
    "parse_staged_spec",
    "project_home",
    "spec_home",
]
