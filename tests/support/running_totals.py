"""The exactly-once check of a keyed running-totals pipeline over the bounded generator.

``barrierflow.transforms.aggregations:keyed_running_totals`` in update mode writes one row per
changed key and epoch (``key``, ``count``, ``value_sum``). Its output, across every attempt, is
exactly once when no update is written twice and every key's last update is its total over
every record the generator produces (:func:`recount`, from the generator's formula).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

#: The transformation whose output these checks know, and a version of it that writes an
#: impossible state (key 0 counted 1000 times per record), which deep verification fails.
HEALTHY = "barrierflow.transforms.aggregations:keyed_running_totals"
POISONED = "tests.verification.state_transforms:totals_with_a_poisoned_key"


def totals_spec(folder: Path, file: str, *, name: str, partitions: int, records: int, keys: int,
                shuffle: int, function: str = HEALTHY, state_store: str = "hdfs", checkpoint_interval: str = "200ms",
                spark_conf: Mapping[str, str] | None = None) -> Path:
    """Write ``folder/file``: generator (``partitions`` x ``records``, 20 per batch, ``keys``
    keys) -> ``function`` in update mode -> Parquet at ``folder/out``, with its work dir and
    checkpoint store under ``folder`` (every spec of one folder names the same stores, as an
    upgrade keeps them) and an expectation suite that fails a count above the input's size."""
    suite = folder / "suite.json"
    suite.write_text(json.dumps({"name": "totals", "expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "min_value": 1, "max_value": partitions * records}}]}))
    data = {
        "version": 1, "name": name, "work_dir": str(folder / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": partitions, "rows_per_second": 0,
                     "max_records_per_batch": 20, "records_per_partition": records, "keys": keys}],
        "transformation": {"function": function, "output_mode": "update"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{folder / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{folder / 'checkpoints'}", "interval": checkpoint_interval,
                       "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": shuffle, "state_store": state_store,
                  **({"conf": dict(spark_conf)} if spark_conf else {})},
        "verification": {"expectations": str(suite)},
    }
    path = folder / file
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


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
