"""How a benchmark states a figure measured over rounds: the median, with the lowest and the highest round.

A comparison is a result only when its systems or modes ran in alternating order inside one run
for at least :data:`MIN_ROUNDS` rounds; a run with fewer rounds still prints its table, and its
header says that it is a trial (:func:`rounds_note`). A mean would let one disturbed round move
the figure; the median does not, and the spread beside it shows how far the rounds agree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["MIN_ROUNDS", "median", "median_spread", "per_round", "ratios", "rounds_note"]

#: Fewer rounds than this make a trial, not a figure to cite.
MIN_ROUNDS = 3


def median(values: Sequence[float]) -> float:
    """The median of the finite ``values`` (NaN when there is none)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def median_spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``median (lowest-highest)`` of the finite ``values``, each formatted with ``fmt``; one value
    alone; ``-`` when there is none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "-"
    if len(finite) == 1:
        return format(finite[0], fmt)
    return f"{format(statistics.median(finite), fmt)} ({format(min(finite), fmt)}-{format(max(finite), fmt)})"


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per round, numerator / denominator (NaN where the denominator is not a positive number)."""
    return [a / b if math.isfinite(b) and b > 0 else math.nan
            for a, b in zip(numerators, denominators, strict=True)]


def per_round(values: Sequence[float], fmt: str = ".2f", sep: str = ", ") -> str:
    """Every round's value, in round order (``-`` for one that is not a number)."""
    return sep.join(format(v, fmt) if math.isfinite(v) else "-" for v in values)


def rounds_note(rounds: int) -> str:
    """What the header adds for a run of ``rounds`` rounds: nothing from :data:`MIN_ROUNDS` on."""
    if rounds >= MIN_ROUNDS:
        return ""
    return f" (fewer than {MIN_ROUNDS} rounds: a trial, not a figure to cite)"
