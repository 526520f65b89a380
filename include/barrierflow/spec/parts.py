"""A spec's stages, whatever its shape, for code that walks them (a chaos run's scratch copies
and refusals): a single-stage spec is one part named after the pipeline, the spec itself; a
spec of several has one part per stage, in the spec's order. The same for the parsed YAML.

This is where the spec's shape is read, so its callers never ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from barrierflow.spec.models import PipelineSpec
from barrierflow.spec.stages import StagedPipelineSpec, is_staged


@dataclass(frozen=True)
class SpecPart:
    """One stage of a loaded spec.

    Attributes:
        name: the stage's name (one stage: the pipeline's).
        part: what it runs: an object with ``sources``, ``sinks`` and ``transformation`` (one
            stage: the spec itself).
        label: how messages name it: ``stage 'a'``, or ``pipeline 't'`` for one stage.
        field_prefix: how spec errors name a field of it: ``stages[<index>].``, or nothing for
            one stage (its fields are top-level).
    """

    name: str
    part: Any
    label: str
    field_prefix: str = ""


def spec_parts(spec: PipelineSpec | StagedPipelineSpec) -> list[SpecPart]:
    """The stages of ``spec`` (module docstring)."""
    if isinstance(spec, StagedPipelineSpec):
        return [SpecPart(s.name, s, f"stage {s.name!r}", f"stages[{index}].") for index, s in enumerate(spec.stages)]
    return [SpecPart(spec.name, spec, f"pipeline {spec.name!r}")]


def channel_topics(spec: PipelineSpec | StagedPipelineSpec) -> dict[str, str]:
    """Each channel's name -> its topic (none for one stage, which has no channels)."""
    if isinstance(spec, StagedPipelineSpec):
        return {c.name: c.topic_for(spec.name) for c in spec.channels}
    return {}


@dataclass(frozen=True)
class RawPart:
    """One stage of a parsed (not yet loaded) spec: its ``name``, its mapping ``data`` (one
    stage: the spec's own) and ``where``: the path to that mapping in the spec's data
    (``("stages", index)``, or ``()`` for one stage)."""

    name: str
    data: dict[str, Any]
    where: tuple[str | int, ...]


def raw_parts(data: dict[str, Any]) -> list[RawPart]:
    """The stages of the parsed spec ``data`` (module docstring); a stage without a name is
    named after the pipeline."""
    if is_staged(data):
        return [RawPart(str(stage.get("name", data.get("name"))), stage, ("stages", index))
                for index, stage in enumerate(data["stages"])]
    return [RawPart(str(data.get("name")), data, ())]
