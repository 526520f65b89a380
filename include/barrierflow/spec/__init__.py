"""Pipeline specs: typed models, the multi-stage graph and the YAML loader.

The names below are loaded on first use (PEP 562): a Spark Python worker that unpickles a
source needs only :mod:`barrierflow.spec.models`, and building the graph's and the stages'
models as well cost each such worker process about 0.1 s of CPU.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        StageSpec,
    )
    from barrierflow.spec.stages import (
        ChannelSinkSpec,
        ChannelSourceSpec,
        ChannelSpec,
        PipelineSpec,
        StageEntry,
    )

#: Each public name and the module that defines it.
_HOMES = {
    **dict.fromkeys(("Cycle", "Edge", "StageGraph", "build_graph"), "barrierflow.spec.graph"),
    **dict.fromkeys(("load_any_spec", "load_spec", "parse_any_spec", "parse_spec", "parse_staged_spec",
                     "project_home", "spec_home"), "barrierflow.spec.loader"),
    **dict.fromkeys(("CheckpointSpec", "DiscardSinkSpec", "GeneratorSourceSpec", "KafkaSourceSpec",
                     "ParquetSinkSpec", "StageSpec"), "barrierflow.spec.models"),
    **dict.fromkeys(("ChannelSinkSpec", "ChannelSourceSpec", "ChannelSpec", "PipelineSpec", "StageEntry"),
                    "barrierflow.spec.stages"),
}

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
    "StageEntry",
    "StageGraph",
    "StageSpec",
    "build_graph",
    "load_any_spec",
    "load_spec",
    "parse_any_spec",
    "parse_spec",
    "parse_staged_spec",
    "project_home",
    "spec_home",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
