"""What a transformation receives, and how a spec's import path is resolved."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from barrierflow.spec.models import PipelineSpec


@dataclass(frozen=True)
class TransformContext:
    """What a transformation gets beside its input rows.

    ``spec`` is the spec the stage runs as (for a stage of a multi-stage pipeline, its derived
    single-stage spec: ``spec.name`` is ``<pipeline>-<stage>``); ``options`` is a copy of
    ``transformation.options``. Nothing here changes between calls for one spec, so a
    transformation that uses only its input and this context is deterministic.
    """

    spec: PipelineSpec
    options: dict[str, Any]

    @property
    def event_time_column(self) -> str | None:
        """``event_time.column``, None when the spec has no ``event_time`` section."""
        return self.spec.event_time.column if self.spec.event_time else None

    @property
    def watermark_delay_seconds(self) -> float:
        """``event_time.watermark_delay`` in seconds (0 without ``event_time``)."""
        return self.spec.event_time.watermark_delay if self.spec.event_time else 0.0

    def with_watermark(self, df: DataFrame) -> DataFrame:
        """``df.withWatermark(event_time.column, event_time.watermark_delay)``: what a
        transformation with event-time windows or other state must call before aggregating
        in output mode ``append`` (barrierflow never adds a watermark itself).

        Raises:
            SpecError: the spec has no ``event_time`` section (naming the field to add).
        """
        column = self.event_time_column
        if column is None:
            raise SpecError("<spec>", [("event_time", "the transformation sets a watermark but the spec has no "
                                                      "event_time section; add event_time.column and "
                                                      "event_time.watermark_delay")])
        return df.withWatermark(column, f"{int(self.watermark_delay_seconds * 1000)} milliseconds")


Transformation = Callable[["DataFrame", TransformContext], "DataFrame"]


def load_transformation(spec: PipelineSpec, spec_path: str = "<spec>") -> Transformation:
    """Import ``transformation.function`` ('package.module:callable').

    Raises:
        SpecError: naming the field, if the module or callable cannot be imported.
    """
    module_name, _, attr = spec.transformation.function.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(spec_path, [("transformation.function",
                                     f"cannot import module {module_name!r}: {exc}")]) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise SpecError(spec_path, [("transformation.function",
                                     f"module {module_name!r} has no callable {attr!r}")])
    return func  # type: ignore[no-any-return]
