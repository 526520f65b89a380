"""What the launch DAG derives from a spec alone (safe at DAG-parse time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from barrierflow.spec.stages import PipelineSpec


def bounded_sources(spec: PipelineSpec) -> bool:
    """Whether the job ends by itself: its source has an end (``records_per_partition``); for a
    multi-stage spec, every source that is not a channel (those of the source stages). Reads
    nothing but the spec; the launch DAG's ``until_exhausted`` defaults to it."""
    own = [src for stage in spec.stages for src in stage.sources if getattr(src, "type", None) != "channel"]
    return bool(own) and all(getattr(src, "records_per_partition", None) is not None for src in own)
