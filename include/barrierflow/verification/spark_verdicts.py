"""Passing verdicts of the plainest expectations, computed by Spark in one pass per kind.

Great Expectations evaluates each expectation on a Spark DataFrame as its own metric jobs, and
a key-uniqueness expectation as a window function (a sort of every row): on the 6.3 M state rows
of the upgrade benchmark, ``expect_compound_columns_to_be_unique`` took 9.3 s where a hash
aggregation answers the same question in 4.4 s, and four ``expect_column_values_to_be_between``
took 1 s each where one aggregation answers all four in 0.7 s. Deep verification runs on every
checkpoint the canary of an upgrade waits for, so this is time a changed pipeline waits.

:func:`passing` answers, for the expectations whose meaning it states exactly as GE's, only
whether each one passes; an expectation it cannot decide exactly (another kind, any other kwarg
such as ``mostly`` or strict bounds, a column that is not there or not numeric) is left out, and
so is every expectation that fails: GE evaluates those, so what a failed check says (its
unexpected count, its sample) is always GE's. The verdicts (``tests/verification/
test_spark_verdicts.py`` compares them with GE's on edge cases: nulls, bounds, duplicates, all-null
rows):

* ``expect_column_values_to_be_between(column, min_value, max_value)`` (one bound may be
  missing or null): a non-null value below ``min_value`` or above ``max_value`` fails; nulls are
  not judged.
* ``expect_column_values_to_not_be_null(column)``: any null fails.
* ``expect_column_values_to_be_unique(column)``: a non-null value held by two rows fails.
* ``expect_compound_columns_to_be_unique(column_list)``: two rows with equal values in every
  listed column fail (nulls compare equal); a row whose listed columns are all null is not judged
  (GE's default ``ignore_row_if="all_values_are_missing"``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

BETWEEN = "expect_column_values_to_be_between"
NOT_NULL = "expect_column_values_to_not_be_null"
UNIQUE = "expect_column_values_to_be_unique"
COMPOUND_UNIQUE = "expect_compound_columns_to_be_unique"
#: The kwargs each decided kind may have: any other kwarg leaves the expectation to GE.
KWARGS = {BETWEEN: {"column", "min_value", "max_value"}, NOT_NULL: {"column"}, UNIQUE: {"column"},
          COMPOUND_UNIQUE: {"column_list"}}
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")


def _bound(value: Any) -> bool:
    """Whether ``value`` is a bound this module compares as GE does: a finite int or float, or None."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value))


def _decidable(kind: str, kwargs: dict[str, Any], types: dict[str, str]) -> bool:
    if kind not in KWARGS or not set(kwargs) <= KWARGS[kind]:
        return False
    if kind == COMPOUND_UNIQUE:
        columns = kwargs.get("column_list")
        return (isinstance(columns, list) and len(columns) >= 1 and len(set(columns)) == len(columns)
                and all(isinstance(c, str) and c in types for c in columns))
    column = kwargs.get("column")
    if not isinstance(column, str) or column not in types:
        return False
    if kind == BETWEEN:
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        return (types[column] in _NUMERIC and _bound(low) and _bound(high)
                and (low is not None or high is not None) and (low is None or high is None or low <= high))
    return True


def _unexpected_rows(kind: str, kwargs: dict[str, Any]) -> Column:
    """1 for a row the expectation judges unexpected, else 0 (between and not-null)."""
    from pyspark.sql import functions as F

    value = F.col(kwargs["column"])
    if kind == NOT_NULL:
        bad = value.isNull()
    else:
        low, high = kwargs.get("min_value"), kwargs.get("max_value")
        out = F.lit(False)
        if low is not None:
            out = out | (value < F.lit(low))
        if high is not None:
            out = out | (value > F.lit(high))
        bad = value.isNotNull() & out
    return F.when(bad, 1).otherwise(0)


def _has_duplicates(rows: DataFrame, columns: list[str]) -> bool:
    """Whether two rows not null in every one of ``columns`` at once hold equal values in all of them."""
    from functools import reduce

    from pyspark.sql import functions as F

    judged = rows.select(*columns).where(reduce(lambda a, b: a | b, (F.col(c).isNotNull() for c in columns)))
    return bool(judged.groupBy(*columns).count().where(F.col("count") > 1).limit(1).count())


def passing(rows: DataFrame, configs: list[tuple[str, dict[str, Any]]]) -> set[int]:
    """The indexes of ``configs`` (type, kwargs) this module decides and finds passing on ``rows``
    (see the module's contract): one aggregation for every between and not-null expectation, one
    grouping per uniqueness expectation. Nothing is collected but counts."""
    from pyspark.sql import functions as F

    types = dict(rows.dtypes)
    decided = [i for i, (kind, kwargs) in enumerate(configs) if _decidable(kind, kwargs, types)]
    counted = [i for i in decided if configs[i][0] in (BETWEEN, NOT_NULL)]
    out: set[int] = set()
    if counted:
        [totals] = rows.agg(*(F.sum(_unexpected_rows(*configs[i])).alias(f"u{i}") for i in counted)).collect()
        out |= {i for i in counted if not totals[f"u{i}"]}
    for i in decided:
        kind, kwargs = configs[i]
        if kind in (UNIQUE, COMPOUND_UNIQUE):
            columns = [kwargs["column"]] if kind == UNIQUE else list(kwargs["column_list"])
            if not _has_duplicates(rows, columns):
                out.add(i)
    return out
