"""The stored reports of the batch side (``barrierflow.ops.batch.stored_report``) and the Airflow
read of a run's own report (``barrierflow.airflow.tasks.batch_report``), without Spark.

The stream-vs-batch comparison writes ``reports/recompute-latest.json``; before it was named
"recompute" everywhere it wrote ``reports/reconciliation-latest.json``. That legacy file is
read when no report exists under the new key, and never preferred over one that does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from barrierflow.airflow.errors import BatchReportError
from barrierflow.airflow.tasks import batch_report
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.batch import REPORT_KEYS, report_keys, stored_report
from barrierflow.spec import parse_spec

from tests.pipeline_specs import spec_dict, write_spec

NEW_KEY = "reports/recompute-latest.json"
LEGACY_KEY = "reports/reconciliation-latest.json"


def _report(tag: str, *, passed: bool = True) -> dict[str, Any]:
    return {"pipeline": "t", "tag": tag, "passed": passed, "difference_count": 0 if passed else 1,
            "differences": [] if passed else [{"kind": "missing"}], "message": "m"}


@pytest.fixture
def lake_spec(tmp_path: Path) -> tuple[Path, CheckpointStore]:
    """A single-stage spec with a Parquet sink (nothing has run: the store holds only what a test puts)."""
    data = spec_dict(tmp_path, sinks=[{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}])
    return write_spec(tmp_path, data), CheckpointStore.for_spec(parse_spec(data))


def test_the_comparison_report_is_written_under_recompute_and_read_under_either_name(
        lake_spec: tuple[Path, CheckpointStore]) -> None:
    spec_path, store = lake_spec
    assert REPORT_KEYS["recompute"] == NEW_KEY and report_keys("recompute") == (NEW_KEY, LEGACY_KEY)
    assert report_keys("rollups") == ("reports/rollups-latest.json",)
    assert stored_report(spec_path, "recompute") is None

    store.objects.put_bytes(LEGACY_KEY, json.dumps(_report("before-the-rename")).encode())
    legacy = stored_report(spec_path, "recompute")
    assert legacy is not None and legacy.key == LEGACY_KEY and legacy.legacy
    assert legacy.document["tag"] == "before-the-rename"

    store.objects.put_bytes(NEW_KEY, json.dumps(_report("run-2")).encode())
    current = stored_report(spec_path, "recompute")
    assert current is not None and current.key == NEW_KEY and not current.legacy
    assert current.document["tag"] == "run-2"  # the legacy file is never preferred


def test_an_unknown_report_name_is_refused_naming_the_known_ones(lake_spec: tuple[Path, CheckpointStore]) -> None:
    spec_path, _ = lake_spec
    with pytest.raises(ValueError, match=r"no batch report named 'reconciliation'.*\['recompute', 'rollups'\]"):
        stored_report(spec_path, "reconciliation")


def test_the_compare_task_reads_its_own_run_and_names_a_legacy_report_as_another_runs(
        lake_spec: tuple[Path, CheckpointStore]) -> None:
    spec_path, store = lake_spec
    with pytest.raises(BatchReportError, match=f"no report is at {NEW_KEY}"):
        batch_report(spec_path, "recompute", tag="run-1")

    store.objects.put_bytes(LEGACY_KEY, json.dumps(_report("old-run")).encode())
    with pytest.raises(BatchReportError, match=f"the report of run 'old-run' is at {LEGACY_KEY}"):
        batch_report(spec_path, "recompute", tag="run-1")

    store.objects.put_bytes(NEW_KEY, json.dumps(_report("run-1", passed=False)).encode())
    found = batch_report(spec_path, "recompute", tag="run-1")
    assert found["tag"] == "run-1" and found["passed"] is False and found["differences"] == [{"kind": "missing"}]
