"""The Spark verdicts of the plainest expectations equal Great Expectations' own, on edge cases.

Each case is a small Spark DataFrame (nulls, values on and past the bounds, NaN, duplicate keys,
keys null in one column or in all, no rows at all). For every expectation of one suite,
:func:`spark_verdicts.passing` must name exactly the expectations it decides for which GE's
``BOOLEAN_ONLY`` validation succeeds; the ones it may not decide (``mostly``, a strict bound, a
string column, a missing column) it never names. And ``run_suite`` answers in the suite's order,
a failure with GE's unexpected count.
"""

from __future__ import annotations

from typing import Any

import pytest
from barrierflow.verification import spark_verdicts
from barrierflow.verification.deep import _domain, _expectation, _validate, run_suite

pytestmark = pytest.mark.spark

#: ``a`` and its copies: GE keeps one expectation per type and column of a suite.
SCHEMA = "a bigint, a1 bigint, a2 bigint, a3 bigint, a4 bigint, b double, k1 bigint, k2 string"
NAN = float("nan")
SUITE: list[tuple[str, dict[str, Any]]] = [
    (spark_verdicts.BETWEEN, {"column": "a", "min_value": 0, "max_value": 10}),
    (spark_verdicts.BETWEEN, {"column": "a1", "min_value": 0}),
    (spark_verdicts.BETWEEN, {"column": "a2", "min_value": None, "max_value": 10}),
    (spark_verdicts.BETWEEN, {"column": "b", "min_value": 0.0, "max_value": 1.5}),
    (spark_verdicts.NOT_NULL, {"column": "a"}),
    (spark_verdicts.UNIQUE, {"column": "k1"}),
    (spark_verdicts.COMPOUND_UNIQUE, {"column_list": ["k1", "k2"]}),
    # never decided here: GE's
    (spark_verdicts.BETWEEN, {"column": "a3", "min_value": 0, "max_value": 10, "mostly": 0.5}),
    (spark_verdicts.BETWEEN, {"column": "a4", "min_value": 0, "max_value": 10, "strict_max": True}),
    (spark_verdicts.BETWEEN, {"column": "k2", "min_value": 0}),
    (spark_verdicts.BETWEEN, {"column": "missing", "min_value": 0}),
]
UNDECIDED = {7, 8, 9, 10}
ROWS: dict[str, list[tuple[Any, ...]]] = {  # (a, b, k1, k2)
    "clean": [(0, 0.0, 1, "x"), (10, 1.5, 2, "x"), (5, 0.5, 3, "y")],
    "out of bounds and null": [(-1, 0.5, 1, "x"), (None, 0.5, 2, "x"), (11, 0.5, 3, "x")],
    "nulls only where not judged": [(None, None, None, None), (None, None, None, None), (3, 1.0, 1, "x")],
    "NaN": [(1, NAN, 1, "x"), (2, 0.5, 2, "y")],
    "compound duplicate": [(1, 0.1, 1, "x"), (2, 0.1, 1, "x"), (3, 0.1, 2, "x")],
    "duplicate with one key null": [(1, 0.1, None, "x"), (2, 0.1, None, "x"), (3, 0.1, 2, None), (4, 0.1, 3, None)],
    "unique keys, one null twice": [(1, 0.1, None, "a"), (2, 0.1, None, "b"), (3, 0.1, 7, "c")],
    "no rows": [],
}


#: The rows with ``a`` copied into ``a1``..``a4``.
CASES = {case: [(r[0],) * 5 + r[1:] for r in rows] for case, rows in ROWS.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_spark_verdicts_equal_great_expectations(spark: Any, case: str) -> None:
    rows = spark.createDataFrame(CASES[case], SCHEMA)
    results = _validate("edge", SUITE, rows, "BOOLEAN_ONLY")
    where = {_domain(*config): i for i, config in enumerate(SUITE)}
    ge = {where[_domain(*_expectation(r))]: bool(r.success) for r in results}  # in GE's own order
    assert len(ge) == len(SUITE)
    decided = spark_verdicts.passing(rows, SUITE)
    assert not decided & UNDECIDED, decided
    assert decided == {i for i, passed in ge.items() if passed and i not in UNDECIDED}, (case, ge)


def test_run_suite_keeps_the_suites_order_and_gives_ges_failures(spark: Any) -> None:
    rows = spark.createDataFrame(CASES["compound duplicate"] + [(12,) * 5 + (0.1, 9, "z")], SCHEMA)
    suite = {"name": "s", "expectations": [{"type": t, "kwargs": k} for t, k in SUITE[:7]]}
    checks = run_suite(suite, rows, "suite.json")
    assert [c.passed for c in checks] == [False, True, False, True, True, False, False]
    assert checks[0].message.startswith("expect_column_values_to_be_between(column='a', min_value=0")
    assert "failed: 1 unexpected of 4 state rows, e.g. [12]" in checks[0].message, checks[0].message
    assert "failed: 2 unexpected" in checks[6].message, checks[6].message
