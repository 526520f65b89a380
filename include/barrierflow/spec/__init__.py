"""Pipeline specs: typed models and the YAML loader."""

from barrierflow.spec.loader import load_spec, parse_spec, project_home
from barrierflow.spec.models import (
    CheckpointSpec,
    DiscardSinkSpec,
    GeneratorSourceSpec,
    KafkaSourceSpec,
    ParquetSinkSpec,
    PipelineSpec,
)

__all__ = [
    "CheckpointSpec",
    "DiscardSinkSpec",
    "GeneratorSourceSpec",
    "KafkaSourceSpec",
    "ParquetSinkSpec",
    "PipelineSpec",
    "load_spec",
    "parse_spec",
    "project_home",
]
