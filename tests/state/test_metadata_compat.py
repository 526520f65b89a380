"""The comparison of state without a fingerprint with a planned query by Spark's state metadata
(:func:`barrierflow.state.metadata_compat.compare_by_metadata`), on the operators and schemas
the state reader gives and the windows a stored-keys aggregation counts: each outcome names
what it found, and what it cannot decide is ``unknown``, never compatible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.state.compatibility import Verdict
from barrierflow.state.metadata_compat import (
    PlannedOperatorState,
    PlannedWindow,
    StoredWindows,
    compare_by_metadata,
    struct_fields,
)
from barrierflow.state.reader import OperatorSchema

KEY = "struct<window:struct<start:timestamp,end:timestamp>,key:bigint>"
VALUE = "struct<count:bigint,sum:bigint>"
STORED = OperatorSchema(0, "stateStoreSave", ("default",), 4, KEY, VALUE)
TEN = 10_000_000
TUMBLING = PlannedWindow("window", TEN, TEN)


def planned(*, key: str = "bigint", window: PlannedWindow | None = TUMBLING,
            values: list[tuple[str, str]] | None = None) -> PlannedOperatorState:
    return PlannedOperatorState("Aggregate", "stateStoreSave",
                                [("window", "struct<start:timestamp,end:timestamp>"), ("key", key)],
                                values if values is not None else [("count", "bigint"), ("sum", "bigint")], window)


def windows_of(seen: StoredWindows) -> object:
    return lambda _op, _window: seen


def test_struct_fields_splits_only_the_top_level() -> None:
    assert struct_fields(KEY) == [("window", "struct<start:timestamp,end:timestamp>"), ("key", "bigint")]
    assert struct_fields("struct<a:decimal(10,2),b:array<struct<c:int,d:int>>>") == [
        ("a", "decimal(10,2)"), ("b", "array<struct<c:int,d:int>>")]
    assert struct_fields("bigint") is None


def test_agreement_is_compatible_by_sparks_state_metadata_saying_what_was_compared() -> None:
    [finding] = compare_by_metadata("s", [STORED], [planned()], windows_of(StoredWindows(7, [TEN], 0, 0)), None)
    assert finding.verdict is Verdict.COMPATIBLE
    assert "compatible by Spark's state metadata" in finding.reason and "7 stored window keys" in finding.reason
    assert "not compared: the watermark's definition" in finding.reason


def test_a_changed_window_key_or_value_column_is_named() -> None:
    refusal = "its input does not replay"
    [window] = compare_by_metadata("s", [STORED], [planned()], windows_of(StoredWindows(3, [2 * TEN], 0, 0)), refusal)
    assert window.verdict is Verdict.INCOMPATIBLE and "window changed: 20 s -> 10 s" in window.reason
    [key] = compare_by_metadata("s", [STORED], [planned(key="string")], windows_of(StoredWindows(3, [TEN], 0, 0)),
                                refusal)
    assert key.verdict is Verdict.INCOMPATIBLE and "key column key: bigint -> string" in key.reason, key.reason
    [value] = compare_by_metadata("s", [STORED], [planned(values=[("count", "bigint")])],
                                  windows_of(StoredWindows(3, [TEN], 0, 0)), None)
    assert value.verdict is Verdict.NEEDS_REWRITE and value.rebuild
    assert "value column dropped: sum: bigint" in value.reason, value.reason
    [count] = compare_by_metadata("s", [STORED], [planned(), planned()], windows_of(StoredWindows(3, [TEN], 0, 0)),
                                  refusal)
    assert count.verdict is Verdict.INCOMPATIBLE and "the state holds 1" in count.reason
    [shifted] = compare_by_metadata("s", [STORED], [planned()], windows_of(StoredWindows(3, [TEN], 2, 2)), refusal)
    assert shifted.verdict is Verdict.INCOMPATIBLE
    assert "2 of the state's 3 stored window keys start off" in shifted.reason, shifted.reason


def test_what_the_metadata_cannot_decide_is_unknown() -> None:
    seen = StoredWindows(3, [TEN], 0, 0)
    unnamed = OperatorSchema(0, "unknown", ("default",), 4, KEY, VALUE)
    [no_metadata] = compare_by_metadata("s", [unnamed], [planned()], windows_of(seen), None)
    assert no_metadata.verdict is Verdict.UNKNOWN and "operator metadata (state/0/_metadata)" in no_metadata.reason
    [empty] = compare_by_metadata("s", [STORED], [planned()], windows_of(StoredWindows(0, [], 0, 0)), None)
    assert empty.verdict is Verdict.UNKNOWN and "holds no window key" in empty.reason
    sliding = planned(window=PlannedWindow("window", TEN, TEN // 2))
    [tumbling] = compare_by_metadata("s", [STORED], [sliding], windows_of(seen), None)
    assert tumbling.verdict is Verdict.UNKNOWN and "tumbling" in tumbling.reason
    join = PlannedOperatorState("Join", "symmetricHashJoin", None)
    stored_join = OperatorSchema(0, "symmetricHashJoin", ("left-keyToNumValues",), 4, KEY, VALUE)
    [unplanned] = compare_by_metadata("s", [stored_join], [join], windows_of(seen), None)
    assert unplanned.verdict is Verdict.UNKNOWN and "no state schema from a Join" in unplanned.reason


@pytest.mark.spark
def test_the_planned_operators_come_in_sparks_operator_order_with_their_keys_and_values(
        spark: Any, tmp_path: Path) -> None:
    """A deduplication under an aggregation: Spark numbers the aggregation 0 and the
    deduplication 1 (its planner counts from the root down; a query run once showed
    ``0 stateStoreSave, 1 dedupe`` in its operator metadata). Planned only, nothing runs."""
    from barrierflow.runtime.state_compat import planned_state_operators

    frame = (spark.readStream.schema("k long, v long").json(str(tmp_path))
             .dropDuplicates(["k", "v"]).groupBy("k").count())
    aggregate, dedupe = planned_state_operators(frame)
    assert (aggregate.spark_name, dedupe.spark_name) == ("stateStoreSave", "dedupe")
    assert aggregate.key_fields == [("k", "bigint")] and aggregate.value_fields == [("count", "bigint")]
    assert dedupe.key_fields == [("k", "bigint"), ("v", "bigint")] and dedupe.value_fields is None


def test_one_stage_of_several_unknown_makes_the_report_unknown_and_the_upgrade_needs_the_users_word() -> None:
    """Two stages: a keeps no state, b's state has no fingerprint and its comparison by Spark's
    metadata cannot decide. The report is unknown for b alone; the upgrade refuses it naming
    --assume-compatible, and with it takes b as compatible."""
    from barrierflow.state.compatibility import CompatibilityReport, PlannedStage, StageState, compare
    from barrierflow.upgrade.plan import UnknownCompatibilityError, refuse_unknown

    unnamed = OperatorSchema(0, "unknown", ("default",), 4, KEY, VALUE)
    [why] = compare_by_metadata("b", [unnamed], [planned()], windows_of(StoredWindows(3, [TEN], 0, 0)), None)
    old = [StageState("a", [], None, "4", {"events": "kafka"}, "channel topic ab"),
           StageState("b", [unnamed], None, "4", {"ab": "channel"}, "out (parquet)", by_metadata=[why])]
    new = [PlannedStage("a", [], "4", {"events": "kafka"}, "channel topic ab"),
           PlannedStage("b", [{"operator": "Aggregate"}], "4", {"ab": "channel"}, "out (parquet)")]
    graph, stages = compare(old, new, old_channels={}, new_channels={}, old_storage="s3://x", new_storage="s3://x")
    report = CompatibilityReport("p", "p.yaml", "p.yaml", 7, "global checkpoint", graph, stages)
    assert report.verdict is Verdict.UNKNOWN and report.unknown_stages == ["b"]
    assert [s.basis for s in report.stages] == ["", "spark state metadata"]
    with pytest.raises(UnknownCompatibilityError, match="--assume-compatible"):
        refuse_unknown(report, assume_compatible=False)
    assert refuse_unknown(report, assume_compatible=True) == ["b"]
