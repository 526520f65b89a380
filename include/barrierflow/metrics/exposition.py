"""The Prometheus text exposition format (version 0.0.4), written by hand.

barrierflow serves a handful of gauges, counters and one histogram per stage; the format is
small and stable, so it is written here rather than pulling in ``prometheus_client`` (not a
dependency of the project). :func:`render` turns :class:`Family` values into the text a
Prometheus server scrapes: one ``# HELP`` and ``# TYPE`` line per family, then its samples,
label values escaped (backslash, double quote, newline), floats as Prometheus writes them
(``+Inf``, ``NaN``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["CONTENT_TYPE", "Family", "Histogram", "MetricType", "Sample", "format_value", "render"]

#: The Content-Type of the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Sample:
    """One line: ``<name><suffix>{labels} value``; ``suffix`` is ``_bucket``/``_sum``/``_count``
    for a histogram's lines, empty otherwise."""

    labels: Mapping[str, str]
    value: float
    suffix: str = ""


@dataclass
class Family:
    """A metric family: its name, type, help text and samples (a counter's name ends in ``_total``)."""

    name: str
    type: MetricType
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, labels: Mapping[str, str], value: float, suffix: str = "") -> None:
        self.samples.append(Sample(dict(labels), value, suffix))


@dataclass
class Histogram:
    """Observations counted into cumulative buckets (upper bounds ``bounds``, ascending; ``+Inf`` implied)."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if list(self.bounds) != sorted(self.bounds):
            raise ValueError(f"histogram bounds must ascend: {list(self.bounds)}")
        if not self.counts:
            self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1

    def samples_into(self, family: Family, labels: Mapping[str, str]) -> None:
        """Append the ``_bucket`` (cumulative, ``le`` label), ``_sum`` and ``_count`` lines."""
        for bound, count in zip(self.bounds, self.counts, strict=True):
            family.add({**labels, "le": format_value(bound)}, count, "_bucket")
        family.add({**labels, "le": "+Inf"}, self.count, "_bucket")
        family.add(labels, self.total, "_sum")
        family.add(labels, self.count, "_count")


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it: integers without a fraction, ``+Inf``/``-Inf``/``NaN``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def render(families: Iterable[Family]) -> str:
    """The exposition text of ``families`` (a family without samples is left out)."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {family.help.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            lines.append(f"{family.name}{sample.suffix}{_labels(sample.labels)} {format_value(sample.value)}")
    return "\n".join(lines) + "\n" if lines else ""
