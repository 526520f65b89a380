"""The generator's options as its Spark workers read them: plain values, no spec models.

The driver validates a generator's options once, when the spec is loaded
(:class:`barrierflow.spec.sources.GeneratorSourceSpec`), and hands them to the data source as
that model's JSON (the ``spec`` option). Validating it again in every Python process Spark
starts for the source (the streaming source runner, the data source planners, the readers of
its partitions) would import the spec models there: pydantic and the building of their
validators, about 0.13 core-seconds per process on top of pyspark and pyarrow (measured on
2 cores). :meth:`GeneratorParams.from_json` reads the same JSON into a frozen dataclass with
the same field names instead.

Contract: :meth:`GeneratorParams.from_json` of a ``GeneratorSourceSpec``'s
``model_dump_json()`` has every field this class declares equal to the model's
(``tests/spec/test_generator_params.py`` holds the two together); a JSON that lacks a field
raises :class:`~barrierflow.errors.SourceError` naming it (a spec written by another version).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from barrierflow.errors import SourceError

__all__ = ["GeneratorParams", "SilentSpan", "silent_seconds"]


class _Span(Protocol):
    partition: int
    start: float
    end: float


def silent_seconds(periods: Iterable[_Span], partition: int, elapsed: float) -> float:
    """How many of the first ``elapsed`` seconds ``partition`` was silent in ``periods`` (the
    generator's ``silent_periods``, as spec models or as :class:`SilentSpan`)."""
    return sum(max(0.0, min(elapsed, p.end) - p.start) for p in periods
               if p.partition == partition and elapsed > p.start)


@dataclass(frozen=True)
class SilentSpan:
    """A wall-clock span in which one partition produces nothing (``silent_periods``)."""

    partition: int
    start: float
    end: float


@dataclass(frozen=True)
class GeneratorParams:
    """The fields of ``GeneratorSourceSpec`` that the generator's record function and readers use."""

    name: str
    partitions: int
    rows_per_second: float
    max_records_per_batch: int
    keys: int
    event_time_start: str
    event_time_skew_ms: tuple[int, ...]
    partition_rate_factors: tuple[float, ...]
    event_time_step_ms: float | None
    malformed_every: int
    records_per_partition: int | None
    silent_periods: tuple[SilentSpan, ...]

    @classmethod
    def from_json(cls, text: str) -> GeneratorParams:
        """The params of a validated spec's JSON (the data source's ``spec`` option)."""
        data: dict[str, Any] = json.loads(text)
        try:
            return cls(
                name=str(data["name"]),
                partitions=int(data["partitions"]),
                rows_per_second=float(data["rows_per_second"]),
                max_records_per_batch=int(data["max_records_per_batch"]),
                keys=int(data["keys"]),
                event_time_start=str(data["event_time_start"]),
                event_time_skew_ms=tuple(int(v) for v in data["event_time_skew_ms"]),
                partition_rate_factors=tuple(float(v) for v in data["partition_rate_factors"]),
                event_time_step_ms=None if data["event_time_step_ms"] is None else float(data["event_time_step_ms"]),
                malformed_every=int(data["malformed_every"]),
                records_per_partition=(None if data["records_per_partition"] is None
                                       else int(data["records_per_partition"])),
                silent_periods=tuple(SilentSpan(int(p["partition"]), float(p["start"]), float(p["end"]))
                                     for p in data["silent_periods"]),
            )
        except KeyError as missing:
            raise SourceError(
                f"the generator's options lack {missing}: the driver and its Spark workers run different versions "
                "of barrierflow; install one version on both and start the pipeline again") from None

    def silent_seconds(self, partition: int, elapsed: float) -> float:
        """How many of the first ``elapsed`` seconds ``partition`` was silent."""
        return silent_seconds(self.silent_periods, partition, elapsed)
