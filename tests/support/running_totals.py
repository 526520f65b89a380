"""The exactly-once check of a keyed running-totals pipeline over the bounded generator.

``barrierflow.transforms.aggregations:keyed_running_totals`` in update mode writes one row per
changed key and epoch (``key``, ``count``, ``value_sum``). Its output, across every attempt, is
exactly once when no update is written twice and every key's last update is its total over
every record the generator produces (:func:`recount`, from the generator's formula).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def recount(partitions: int, records: int, keys: int) -> dict[int, tuple[int, int]]:
    """key -> (count, sum of value) of every record of a generator of ``partitions`` x
    ``records`` records over ``keys`` keys (key = n % keys, value = n * 2654435761 % 1000,
    n = i * partitions + p)."""
    totals: dict[int, tuple[int, int]] = {}
    for p in range(partitions):
        for i in range(records):
            n = i * partitions + p
            count, total = totals.get(n % keys, (0, 0))
            totals[n % keys] = (count + 1, total + (n * 2654435761) % 1000)
    return totals


def assert_exactly_once(rows: Iterable[Mapping[str, Any]], expected: dict[int, tuple[int, int]], *,
                        count: str = "count", total: str = "value_sum") -> None:
    """No update in ``rows`` written twice, and every key's last update is its ``expected``
    (count, sum) (``count``, ``total``: the columns holding them)."""
    rows = list(rows)
    updates = [(r["key"], r[count]) for r in rows]
    assert len(updates) == len(set(updates)), "an update was written twice"
    final: dict[int, tuple[int, int]] = {}
    for r in rows:
        if r[count] > final.get(r["key"], (0, 0))[0]:
            final[r["key"]] = (r[count], r[total])
    assert final == expected
