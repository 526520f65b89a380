"""The batch side, end to end with Airflow's test runner (``dag.test()``) on a real lake.

The lake (:mod:`tests.batch.lake`) is produced once for the module by a real run of the
demo-style pipeline; every DAG then runs the way Airflow runs it: the rollup and recompute
(stream-vs-batch comparison) DAGs spark-submit ``jobs/batch_job.py`` (local[1], no Spark
connection) and read back the report their own run stored; the data-quality DAG runs Great
Expectations in its task. Tests that alter the committed output put it back when they end.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.batch.lake import DAYS, NAME, Lake, make_lake
from tests.dags.conftest import run_dag

# One worker runs the module (the lake is made once); scheduled early: about 4 minutes under load.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900),
              pytest.mark.xdist_group("batch-lake"), pytest.mark.slow(90)]

ROLLUP = f"barrierflow_rollup__{NAME}"
RECOMPUTE = f"barrierflow_recompute__{NAME}"
QUALITY = f"barrierflow_quality__{NAME}"


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    return make_lake(spark, tmp_path_factory.mktemp("lake"))


@pytest.fixture
def submit_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """spark-submit of this venv on PATH, no Spark connection (the spec's master is used)."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield


def rollup_rows(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    """The rollup rows per day partition, sorted by key."""
    out = {}
    for folder in sorted((lake.root / "rollups").glob("day=*")):
        rows = [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        out[folder.name.removeprefix("day=")] = sorted(rows, key=lambda r: r["key"])
    return out


def expected_rollups(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    """Computed here from the committed rows, independently of Spark."""
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in lake.rows():
        acc = sums[(r["window_start"].date().isoformat(), int(r["key"]))]
        acc[0] += int(r["count"])
        acc[1] += int(r["value_sum"])
        acc[2] += 1
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (day, key), (count, value_sum, windows) in sorted(sums.items()):
        out[day].append({"key": key, "count": count, "value_sum": value_sum, "windows": windows})
    return dict(out)


def test_rollup_dag_writes_daily_rollups_and_a_rerun_of_a_day_replaces_only_that_day(
    monkeypatch: pytest.MonkeyPatch, lake: Lake, submit_env: None
) -> None:
    run = run_dag(monkeypatch, lake.pipelines, ROLLUP)

    assert run.state == "success", run.log[-6000:]
    assert run.task_states == {"rollup": "success", "rollup_report": "success"}
    assert "--master local[1]" in run.log and "batch_job.py rollup" in run.log
    report = run.xcom("rollup_report")
    expected = expected_rollups(lake)
    assert sorted(expected) == list(DAYS)  # the lake spans two UTC days
    assert report["days"] == {day: len(rows) for day, rows in expected.items()} and report["tag"] == run.run_id
    assert rollup_rows(lake) == expected
    first_day = sorted((lake.root / "rollups" / f"day={DAYS[0]}").glob("*.parquet"))
    first_day_state = [(f.name, f.stat().st_mtime_ns) for f in first_day]

    rerun = run_dag(monkeypatch, lake.pipelines, ROLLUP, day=DAYS[1])

    assert rerun.state == "success", rerun.log[-6000:]
    assert rerun.xcom("rollup_report")["days"] == {DAYS[1]: len(expected[DAYS[1]])}
    assert rollup_rows(lake) == expected  # the same rows, none twice
    assert [(f.name, f.stat().st_mtime_ns) for f in sorted(first_day[0].parent.glob("*.parquet"))] \
        == first_day_state  # the other day was not touched


def test_rollup_dag_refuses_a_bad_day_at_trigger_time(monkeypatch: pytest.MonkeyPatch, lake: Lake) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="day"):
        run_dag(monkeypatch, lake.pipelines, ROLLUP, day="yesterday")


def test_recompute_dag_passes_on_the_real_output_and_names_each_altered_row(
    monkeypatch: pytest.MonkeyPatch, lake: Lake, submit_env: None
) -> None:
    run = run_dag(monkeypatch, lake.pipelines, RECOMPUTE)

    assert run.state == "success", run.log[-6000:]
    summary = run.xcom("compare")
    assert summary["passed"] is True and summary["differences"] == []
    assert summary["stream_rows"] == summary["batch_rows"] > 20
    reports = lake.checkpoints / "reports"
    assert (reports / "recompute-latest.json").is_file() and not (reports / "reconciliation-latest.json").exists()

    with lake.altered():
        # One row changed, one removed, one duplicated: in three different committed files.
        parts = [p for p in lake.parts() if len(pq.read_table(p)) >= 2]
        closed = [p for p in parts if str(pq.read_table(p).to_pylist()[0]["window_end"]) < summary["end"]]
        changed_file, removed_file, duplicated_file = closed[0], closed[1], closed[-1]
        rows = pq.read_table(changed_file).to_pylist()
        changed = rows[0]
        lake.rewrite(changed_file, [{**changed, "count": changed["count"] + 1}, *rows[1:]])
        rows = pq.read_table(removed_file).to_pylist()
        removed = rows[0]
        lake.rewrite(removed_file, rows[1:])
        rows = pq.read_table(duplicated_file).to_pylist()
        duplicated = rows[-1]
        lake.rewrite(duplicated_file, [*rows, duplicated])

        failed = run_dag(monkeypatch, lake.pipelines, RECOMPUTE)

    assert failed.state == "failed" and failed.task_states == {"recompute": "success", "compare": "failed"}
    assert "3 output rows differ from the batch recomputation" in failed.log
    for kind, row in (("changed", changed), ("missing", removed), ("duplicated", duplicated)):
        start = row["window_start"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        named = re.search(rf"{kind}: window \[window_start={re.escape(start)}Z, window_end=[^\]]+\] "
                          rf"key \[key={row['key']}\]", failed.log)
        assert named, (kind, row, failed.log[-4000:])


def test_quality_dag_passes_on_the_output_and_leaves_offline_data_docs(
    monkeypatch: pytest.MonkeyPatch, lake: Lake
) -> None:
    run = run_dag(monkeypatch, lake.pipelines, QUALITY)

    assert run.state == "success", run.log[-6000:]
    summary = run.xcom("validate")
    assert summary["passed"] is True and summary["data_docs"] == "reports/quality/index.html"
    output = next(o for o in summary["outcomes"] if o["target"] == "output")
    assert output["expectations"] == 9 and output["rows"] > 0 and not output["skipped"]
    site = lake.checkpoints / "reports" / "quality"
    pages = sorted(site.rglob("*.html"))
    assert (site / "index.html") in pages and any("validations" in p.parts for p in pages)
    for page in pages:
        html = page.read_text(encoding="utf-8")
        external = re.findall(r"<(?:script|link|img|iframe)\b[^>]*(?:src|href)\s*=\s*[\"']?(?:https?:)?//[^>]*>",
                              html, re.IGNORECASE) + re.findall(r"url\(\s*[\"']?(?:https?:)?//", html)
        assert external == [], (page, external[:3])
        for ref in re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)\s*=\s*\"([^\"#?]+)", html):
            assert (page.parent / ref).resolve().is_file(), (page, ref)  # every local resource is there
    assert (lake.checkpoints / "reports" / "quality-latest.json").is_file()  # linked from the Checkpoints page


def test_quality_dag_fails_on_a_broken_batch_naming_expectation_column_and_rows(
    monkeypatch: pytest.MonkeyPatch, lake: Lake
) -> None:
    with lake.altered():
        newest = lake.parts()[-1]
        rows = pq.read_table(newest).to_pylist()
        lake.rewrite(newest, [{**rows[0], "key": 4242}, *rows[1:]])

        run = run_dag(monkeypatch, lake.pipelines, QUALITY, epochs=100)

    assert run.state == "failed" and run.task_states == {"validate": "failed"}
    assert re.search(r"output: expect_column_values_to_be_between failed on column key \(1 of \d+ rows unexpected",
                     run.log), run.log[-4000:]
    assert re.search(r"sample of bad rows: \[\{[^]]*'key': 4242", run.log), run.log[-4000:]
