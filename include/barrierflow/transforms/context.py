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
    """``spec`` is the whole pipeline spec; ``options`` is ``transformation.options``."""

    spec: PipelineSpec
    options: dict[str, Any]

    @property
    def event_time_column(self) -> str | None:
        return self.spec.event_time.column if self.spec.event_time else None

    @property
    def watermark_delay_seconds(self) -> float:
        return self.spec.event_time.watermark_delay if self.spec.event_time else 0.0


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
