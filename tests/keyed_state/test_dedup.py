"""deduplicate_by_key with an event-time TTL: the first record of each key, and again the first
record after the key's state expired, as a plain-Python computation gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.keyed_state.churn import churn_spec, expected_firsts
from tests.support.in_session_runs import run_spec


@pytest.mark.spark
@pytest.mark.slow(15)
def test_deduplication_writes_each_lifetimes_first_record(spark: Any, tmp_path: Path) -> None:
    run_spec(spark, churn_spec(tmp_path, ttl=False, dedup=True, name="churn-dedup"), until_exhausted=True)
    rows = spark.read.parquet(str(tmp_path / "out")).selectExpr(
        "key", "value", "unix_micros(event_time) / 1e6 AS event_s").collect()
    assert sorted((r["key"], r["value"], r["event_s"]) for r in rows) == expected_firsts()
