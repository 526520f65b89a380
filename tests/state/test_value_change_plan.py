"""How a value-column change maps the stored aggregation buffer onto the new one (Spark-free):
:func:`~barrierflow.state.value_columns.plan_value_change` over buffers as the planner gives
them, Spark's state schema file read and written, and the JVM helper compiled once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.state.value_columns import (
    ValueColumnsNotSupportedError,
    plan_value_change,
    read_schema_file,
    write_schema_file,
)


def field(name: str, kind: str = "long", nullable: bool = True) -> dict[str, Any]:
    return {"name": name, "type": kind, "simple": {"long": "bigint", "double": "double"}[kind], "nullable": nullable}


COUNT = ("count(1) AS count: bigint", [field("count", nullable=False)])
SUM = ("sum(value) AS value_sum: bigint", [field("sum")])
MAX = ("max(value) AS value_max: bigint", [field("max")])
AVG = ("avg(value) AS value_avg: double", [field("sum", "double"), field("count")])
KEY = ("key: bigint", [])
STORED = "struct<count:bigint,sum:bigint>"


def test_added_kept_and_dropped_columns_map_by_name() -> None:
    added = plan_value_change(0, STORED, [KEY, COUNT, SUM], [KEY, COUNT, SUM, MAX], {"value_max": 500}, where="w")
    assert added.plan == ["old:0", "old:1", "default:500"] and added.added == {"value_max": 500}
    assert [f["name"] for f in added.new_schema["fields"]] == ["count", "sum", "max"]
    assert added.old_schema["fields"][0] == {"name": "count", "type": "long", "nullable": False, "metadata": {}}
    dropped = plan_value_change(0, STORED, [KEY, COUNT, SUM], [KEY, COUNT], {}, where="w")
    assert dropped.plan == ["old:0"] and dropped.dropped == ["value_sum"] and dropped.describe() == "dropped value_sum"
    moved = plan_value_change(0, STORED, [KEY, COUNT, SUM], [KEY, MAX, SUM], {"value_max": None}, where="w")
    assert moved.plan == ["null", "old:1"] and moved.dropped == ["count"]


@pytest.mark.parametrize(("new", "defaults", "message"), [
    ([COUNT, SUM, MAX], {}, r"w: value column max\(value\) AS value_max: bigint is added, and no default is declared "
                            r"for it.*transformation.state_defaults \(e.g. 'state_defaults: \{value_max: 0\}'"),
    ([COUNT, SUM, MAX], {"value_max": "many"}, r"the default \"many\" declared for value column value_max .* is not a "
                                               r"bigint"),
    ([COUNT, SUM, MAX], {"value_max": 1.5}, r"default 1.5 .* is not a bigint"),
    ([COUNT, SUM, AVG], {"value_avg": 0}, r"value_avg: double is added, and its state is 2 fields \(sum, count\)"),
    ([SUM, ("count(value) AS n: bigint", [field("count", nullable=False)])], {"n": None},
     r"value column n is added with the default null, but its state \(count: bigint\) cannot be null"),
])
def test_what_cannot_be_mapped_is_refused_naming_the_column(new: list[Any], defaults: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(ValueColumnsNotSupportedError, match=message):
        plan_value_change(0, STORED, [COUNT, SUM], new, defaults, where="w")


def test_a_stored_value_the_old_spec_does_not_plan_is_not_rewritten() -> None:
    with pytest.raises(ValueColumnsNotSupportedError, match=r"the stored value \(struct<count:bigint>\) is not the "
                                                            r"aggregation buffer the old spec plans"):
        plan_value_change(0, "struct<count:bigint>", [COUNT, SUM], [COUNT, SUM, MAX], {"value_max": 0}, where="w")


def test_schema_file_round_trip(tmp_path: Path) -> None:
    """Spark's version-2 schema file as Spark 4.2 writes it for a running-totals aggregation."""
    key = json.dumps({"type": "struct", "fields": [{"name": "key", "type": "long", "nullable": True, "metadata": {}}]})
    value = json.dumps({"type": "struct", "fields": [
        {"name": "count", "type": "long", "nullable": False, "metadata": {}}] * 800})  # more than one chunk
    path = tmp_path / "schema"
    raw = key.encode()
    path.write_bytes(b"\x00\x02v2" + (1).to_bytes(4, "big") + len(raw).to_bytes(2, "big") + raw
                     + (1).to_bytes(4, "big") + (2).to_bytes(2, "big") + b"{}")
    assert read_schema_file(path) == (key, "{}")
    write_schema_file(path, key, value)
    assert read_schema_file(path) == (key, value)
    assert path.read_bytes().startswith(b"\x00\x02v2\x00\x00\x00\x01")
