"""The Great Expectations suites of the shipped pipelines (``include/expectations/``), without Spark.

Each spec in ``include/pipelines`` declares its suite; the suite parses as deep verification
loads it, every expectation is a valid GE 1.x expectation with valid arguments, its bounds
agree with the spec, and it passes on state rows shaped like the ``statestore`` reader's
(flattened by :func:`barrierflow.verification.deep.flat_fields`) and fails on damaged ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from barrierflow.spec import load_spec
from barrierflow.spec.models import StageSpec
from barrierflow.spec.stages import is_staged
from barrierflow.verification.deep import expectations_path, flat_fields, load_suite_document, run_suite
from pyspark.sql.types import DataType, IntegerType, LongType, StructField, StructType, TimestampType

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The shipped single-stage specs (multi-stage ones such as stages.yaml keep no state to verify yet).
SHIPPED_SPECS = sorted(p for p in (PROJECT_ROOT / "include" / "pipelines").glob("*.yaml")
                       if not is_staged(yaml.safe_load(p.read_text(encoding="utf-8"))))



def _struct(**fields: DataType) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields.items()])


#: The state schemas the transformations produce, as Spark 4.2's statestore reader returns
#: them (key = the grouping columns, value = the aggregation buffer).
STATE_SCHEMAS: dict[str, tuple[StructType, StructType]] = {
    "barrierflow.transforms.aggregations:keyed_window_counts": (
        _struct(window=_struct(start=TimestampType(), end=TimestampType()), key=LongType()),
        _struct(count=LongType(), sum=LongType()),
    ),
    "barrierflow.transforms.aggregations:keyed_running_totals": (
        _struct(key=LongType()),
        _struct(count=LongType(), sum=LongType()),
    ),
}


@pytest.fixture(autouse=True)
def project_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative suite paths in the shipped specs resolve against the project."""
    monkeypatch.setenv("BARRIERFLOW_HOME", str(PROJECT_ROOT))
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "false")


def _suite(spec: StageSpec) -> tuple[Path, dict[str, Any]]:
    path = expectations_path(spec)
    return path, load_suite_document(path)


def _state_columns(spec: StageSpec) -> list[str]:
    key, value = STATE_SCHEMAS[spec.transformation.function]
    names = ["partition_id", "operator_id"]
    for column, schema in (("key", key), ("value", value)):
        names += [name for _, name in flat_fields(column, schema)]
    return names


def _healthy_rows(spec: StageSpec) -> pd.DataFrame:
    """Plausible state: every key in a few windows (or once), counts and sums in range."""
    keys = list(range(0, spec.source.keys, max(1, spec.source.keys // 50)))
    windowed = "key_window_start" in _state_columns(spec)
    starts = [pd.Timestamp("2026-01-01 00:00:00"), pd.Timestamp("2026-01-01 00:00:10")] if windowed else [None]
    rows = []
    for start in starts:
        for i, key in enumerate(keys):
            row: dict[str, Any] = {"partition_id": key % spec.spark.shuffle_partitions, "operator_id": 0}
            if windowed:
                row |= {"key_window_start": start, "key_window_end": start + pd.Timedelta(seconds=10)}
            rows.append(row | {"key_key": key, "value_count": 1 + i % 7, "value_sum": (i * 37) % 1000})
    frame = pd.DataFrame(rows, columns=_state_columns(spec))
    return frame.astype({"partition_id": "int32", "operator_id": "int32"})


@pytest.mark.parametrize("spec_path", SHIPPED_SPECS, ids=lambda p: p.stem)
def test_shipped_spec_declares_a_suite_that_parses(spec_path: Path) -> None:
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
    from great_expectations.expectations.registry import get_expectation_impl

    spec = load_spec(spec_path)
    assert spec.verification is not None and spec.verification.expectations, f"{spec_path} declares no suite"
    path, suite = _suite(spec)
    assert path == PROJECT_ROOT / spec.verification.expectations and path.is_file()
    assert path.parent == PROJECT_ROOT / "include" / "expectations"
    assert suite["name"] == f"{spec.name}-state" and suite["expectations"]
    for item in suite["expectations"]:
        assert set(item) <= {"type", "kwargs", "meta"}, item
        get_expectation_impl(item["type"])  # raises for a name GE 1.x does not know
        # Builds the typed expectation: unknown or ill-typed arguments raise.
        ExpectationConfiguration(type=item["type"], kwargs=item["kwargs"]).to_domain_obj()


@pytest.mark.parametrize("spec_path", SHIPPED_SPECS, ids=lambda p: p.stem)
def test_suite_matches_the_state_schema_and_the_spec(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    _, suite = _suite(spec)
    columns = _state_columns(spec)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for item in suite["expectations"]:
        by_type.setdefault(item["type"], []).append(item["kwargs"])

    (schema,) = by_type["expect_table_columns_to_match_set"]
    assert sorted(schema["column_set"]) == sorted(columns) and schema["exact_match"] is True
    referenced = {kw[k] for kws in by_type.values() for kw in kws for k in ("column", "column_A", "column_B")
                  if k in kw} | {c for kw in by_type.get("expect_compound_columns_to_be_unique", [])
                                 for c in kw["column_list"]}
    assert referenced <= set(columns), referenced - set(columns)

    key_columns = [c for c in columns if c.startswith("key_")]
    assert {"column_list": ["operator_id", *key_columns]} in by_type["expect_compound_columns_to_be_unique"]
    not_null = {kw["column"] for kw in by_type["expect_column_values_to_not_be_null"]}
    assert not_null == {c for c in columns if c.startswith(("key_", "value_"))}
    bounds = {kw["column"]: (kw.get("min_value"), kw.get("max_value"))
              for kw in by_type["expect_column_values_to_be_between"]}
    assert bounds["key_key"] == (0, spec.source.keys - 1)
    assert bounds["partition_id"] == (0, spec.spark.shuffle_partitions - 1)
    assert bounds["value_count"] == (1, None) and bounds["value_sum"] == (0, None)


@pytest.mark.parametrize("spec_path", SHIPPED_SPECS, ids=lambda p: p.stem)
def test_suite_passes_on_healthy_state_and_fails_on_damaged_state(spec_path: Path) -> None:
    spec = load_spec(spec_path)
    path, suite = _suite(spec)
    healthy = _healthy_rows(spec)

    checks = run_suite(suite, healthy, str(path))
    assert len(checks) == len(suite["expectations"])
    assert all(c.passed for c in checks), [c.message for c in checks if not c.passed]

    damaged = pd.concat([healthy, healthy.iloc[[0]]], ignore_index=True)  # one (window,) key held twice
    damaged.loc[1, "value_count"] = -3  # a count that went below zero
    damaged.loc[2, "key_key"] = spec.source.keys + 5  # a key the source never produces
    failed = [c for c in run_suite(suite, damaged, str(path)) if not c.passed]
    assert {c.message.split("(", 1)[0] for c in failed} == {"expect_compound_columns_to_be_unique",
                                                            "expect_column_values_to_be_between"}
    messages = " ".join(c.message for c in failed)
    assert "value_count" in messages and "key_key" in messages
    assert all(c.file == str(path) for c in failed)
    # the suite passes first as pass/fail only; what failed is run again for its counts and a sample
    assert all("? unexpected" not in c.message and "unexpected of" in c.message and "e.g." in c.message
               for c in failed), messages


def test_flat_fields_flattens_nested_structs() -> None:
    key, value = STATE_SCHEMAS["barrierflow.transforms.aggregations:keyed_window_counts"]
    assert flat_fields("key", key) == [
        (("key", "window", "start"), "key_window_start"),
        (("key", "window", "end"), "key_window_end"),
        (("key", "key"), "key_key"),
    ]
    assert [name for _, name in flat_fields("value", value)] == ["value_count", "value_sum"]
    assert flat_fields("partition_id", IntegerType()) == [(("partition_id",), "partition_id")]


def test_an_expectation_that_cannot_run_fails_with_ges_error() -> None:
    suite = {"name": "x", "expectations": [
        {"type": "expect_column_values_to_be_between", "kwargs": {"column": "no_such_column", "min_value": 0}}]}
    (check,) = run_suite(suite, pd.DataFrame({"key_key": [1, 2]}), "suite.json")
    assert not check.passed and "could not be evaluated" in check.message and "no_such_column" in check.message
