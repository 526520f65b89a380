"""Parsing of human durations used in specs ("500ms", "5s", "2 minutes", 1.5)."""

from __future__ import annotations

import re

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration_seconds(value: object) -> float:
    """Return ``value`` as seconds; numbers are seconds, strings carry a unit.

    Raises:
        ValueError: with the accepted forms, if ``value`` is not a duration.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '5s', '500ms' or '2 minutes', got a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return float(value)
    if isinstance(value, str):
        match = _PATTERN.match(value.lower())
        if match and match.group(2) in _UNITS:
            return float(match.group(1)) * _UNITS[match.group(2)]
        if match and match.group(2) == "":
            return float(match.group(1))
    raise ValueError(
        f"expected a duration such as '5s', '500ms' or '2 minutes' (units: ms, s, m, h), got {value!r}"
    )
