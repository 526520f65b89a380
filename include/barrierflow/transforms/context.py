"""What a transformation receives, and how a spec's import path is resolved."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from barrierflow.errors import SpecError
from barrierflow.keyed_state.support import ttl_supported

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from barrierflow.keyed_state.figures import KeyCounters
    from barrierflow.spec.models import StageSpec


@dataclass(frozen=True)
class TransformContext:
    """What a transformation gets beside its input rows.

    ``spec`` is the spec the stage runs as (for a stage of a multi-stage pipeline, its derived
    single-stage spec: ``spec.name`` is ``<pipeline>-<stage>``); ``options`` is a copy of
    ``transformation.options``. Nothing here changes between calls for one spec, so a
    transformation that uses only its input and this context is deterministic.
    """

    spec: StageSpec
    options: dict[str, Any]
    #: where a keyed function counts the keys it started and expired in the run (None: not
    #: counted, e.g. in ``validate --deep`` and the batch replays; :mod:`barrierflow.keyed_state.figures`)
    key_counters: KeyCounters | None = field(default=None, compare=False)

    @property
    def event_time_column(self) -> str | None:
        """``event_time.column``, None when the spec has no ``event_time`` section."""
        return self.spec.event_time.column if self.spec.event_time else None

    @property
    def ttl_seconds(self) -> float | None:
        """``transformation.ttl`` in seconds: a key's state expires when the watermark passes its
        newest event time plus this (:mod:`barrierflow.keyed_state`); None = never."""
        return self.spec.transformation.ttl

    @property
    def emit_on_expiry(self) -> bool:
        """``transformation.emit_on_expiry``: write a final row per key when its state expires."""
        return self.spec.transformation.emit_on_expiry

    @property
    def output_mode(self) -> str:
        """``transformation.output_mode`` ('append', 'update' or 'complete')."""
        return self.spec.transformation.output_mode

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


def load_transformation(spec: StageSpec, spec_path: str = "<spec>") -> Transformation:
    """Import ``transformation.function`` ('package.module:callable').

    Raises:
        SpecError: naming the field, if the module or callable cannot be imported or the
            callable cannot be called with two arguments (see :func:`import_transformation`), or
            the spec sets ``transformation.ttl`` and the callable does not support it
            (:func:`barrierflow.keyed_state.supports_ttl`).
    """
    transform = import_transformation(spec.transformation.function, spec_path)
    if spec.transformation.ttl is not None and not ttl_supported(transform):
        raise SpecError(spec_path, [("transformation.ttl", f"{spec.transformation.function} does not support ttl "
                                                           "(its state would never expire); remove ttl, or use a "
                                                           "function that supports it: "
                                                           "barrierflow.transforms.aggregations:keyed_running_totals, "
                                                           "barrierflow.transforms.deduplication:deduplicate_by_key, "
                                                           "or your own marked with "
                                                           "barrierflow.keyed_state.supports_ttl")])
    return transform


def import_transformation(function: str, spec_path: str = "<spec>",
                          field: str = "transformation.function") -> Transformation:
    """Import ``function`` ('package.module:callable') and check that it can be called as
    every run calls it: ``f(df, context)``, two positional arguments (so ``f(df, ctx)``,
    ``f(df, ctx=None)`` and ``f(*args)`` pass; ``f(df)`` and ``f(df, ctx, extra)`` do not). Starts
    no Spark (the module's own imports run, as they do on the driver).

    Raises:
        SpecError: naming ``field`` and the fix: the module cannot be imported (not found, or
            it raised while importing), it has no such callable, or the callable does not take
            two parameters.
    """
    module_name, _, attr = function.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(spec_path, [(field, f"cannot import module {module_name!r}: {exc}; install the package "
                                            "that holds it, put its folder on PYTHONPATH, or list the package's "
                                            "directory in spark.py_packages")]) from None
    except Exception as exc:  # the user's module failed while importing: name it, not our frames
        raise SpecError(spec_path, [(field, f"importing module {module_name!r} raised {type(exc).__name__}: "
                                            f"{exc}; fix the module")]) from None
    func = getattr(module, attr, None)
    if not callable(func):
        names = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))
                       and getattr(getattr(module, n), "__module__", None) == module.__name__)
        known = f" (it defines: {', '.join(names)})" if names else ""
        raise SpecError(spec_path, [(field, f"module {module_name!r} has no callable {attr!r}{known}; define "
                                            f"'def {attr}(df, context)' there or name an existing function")])
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return func  # type: ignore[no-any-return]  # no introspectable signature (a builtin): called as is
    try:
        signature.bind(None, None)
    except TypeError:
        raise SpecError(spec_path, [(field, f"{function} has the signature {attr}{signature}; a transformation is "
                                            f"called with two arguments, the input DataFrame and a "
                                            f"TransformContext: define it as 'def {attr}(df, context)'")]) from None
    return func  # type: ignore[no-any-return]
