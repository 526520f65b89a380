"""The batch side on lakehouse tables, end to end with Airflow's test runner (``dag.test()``).

One pipeline run per table format (the demo-style windowed counts, written to an Iceberg table
through its default SQLite catalog, or to a Delta table) serves every DAG run of the module. The
rollup and the stream-vs-batch comparison DAGs spark-submit ``jobs/batch_job.py``; the
data-quality DAG runs Great Expectations in its task. All of them read the table as of a cut
(the cut record's Iceberg snapshot id or Delta version), never the table's latest state; what
they read is checked against the table read independently with pyiceberg or ``deltalake``.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from barrierflow.sinks.cut import CutLog
from barrierflow.storage.local import LocalObjectStore

from tests.batch.lake import DAYS, TableLake, make_table_lake
from tests.dags.conftest import run_dag

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900),
              pytest.mark.xdist_group("batch-lake"), pytest.mark.slow(120)]


@pytest.fixture(scope="module", params=["iceberg", "delta"])
def lake(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> TableLake:
    return make_table_lake(spark, tmp_path_factory.mktemp(f"{request.param}-lake"), request.param)


@pytest.fixture
def submit_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """spark-submit of this venv on PATH, no Spark connection (the spec's master is used)."""
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield


def cuts(lake: TableLake) -> CutLog:
    return CutLog(LocalObjectStore(lake.checkpoints))


def newest_cut(lake: TableLake) -> tuple[int, int]:
    """(checkpoint id, table version) of the newest cut record."""
    log = cuts(lake)
    checkpoint = log.checkpoints()[-1]
    version = log.get(checkpoint)["totals"]
    assert version is not None and version.version is not None
    return checkpoint, version.version


def expected_rollups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The daily rollups of ``rows``, computed here, independently of Spark."""
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        acc = sums[(r["window_start"].date().isoformat(), int(r["key"]))]
        acc[0] += int(r["count"])
        acc[1] += int(r["value_sum"])
        acc[2] += 1
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (day, key), (count, value_sum, windows) in sorted(sums.items()):
        out[day].append({"key": key, "count": count, "value_sum": value_sum, "windows": windows})
    return dict(out)


def rollup_rows(rollups_uri: str) -> dict[str, list[dict[str, Any]]]:
    root = Path(rollups_uri.removeprefix("file://"))
    out = {}
    for folder in sorted(root.glob("day=*")):
        rows = [r for f in sorted(folder.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
        out[folder.name.removeprefix("day=")] = sorted(rows, key=lambda r: r["key"])
    return out


def alter_one_row(lake: TableLake, row: dict[str, Any]) -> None:
    """Commit, with the table format's own writer, a new table version in which ``row`` (a row of
    the table) has ``count`` one higher: every row of its key is rewritten (pyiceberg's overwrite
    with a row filter, deltalake's overwrite with a predicate), that one changed."""
    data = lake.read()
    of_key = [r for r in data.to_pylist() if r["key"] == row["key"]]
    changed = [{**r, "count": r["count"] + 1} if r == row else r for r in of_key]
    replacement = pa.Table.from_pylist(changed, schema=data.schema)
    if lake.format == "iceberg":
        from pyiceberg.expressions import EqualTo

        lake.iceberg().overwrite(replacement, overwrite_filter=EqualTo("key", row["key"]))
    else:
        from deltalake import write_deltalake

        write_deltalake(str(lake.delta_path), replacement, mode="overwrite", predicate=f"key = {row['key']}")


def test_batch_dags_read_the_table_as_of_its_cut_and_fail_naming_the_window_of_an_altered_row(
    monkeypatch: pytest.MonkeyPatch, lake: TableLake, submit_env: None
) -> None:
    """Rollups and data quality pass on the table as of its newest cut. Then one committed row is
    altered by another writer of the table (a new table commit, rewriting that row with its count
    changed):

    * the comparison passes: it reads the table as of the cut, and the alteration is a commit
      after it (reading the latest state would have seen it);
    * once a cut covers the alteration, the comparison fails naming the row's window and key.
      The stream would record such a cut with its next table commit, whose snapshot (version)
      follows the alteration; the bounded source has ended, so the test records the cut a later
      commit would have, at the table's current version, in the newest cut record (the same
      record a sink writes, through :class:`~barrierflow.sinks.cut.CutLog`). Editing the data
      files the cut already references instead would change committed files under the table's
      metadata (their sizes and statistics), which no table writer does.
    """
    name = lake.name
    checkpoint, version = newest_cut(lake)
    committed = lake.read(version)
    assert committed.num_rows > 20

    rollup = run_dag(monkeypatch, lake.pipelines, f"barrierflow_rollup__{name}")
    assert rollup.state == "success", rollup.log[-6000:]
    report = rollup.xcom("rollup_report")
    expected = expected_rollups(committed.to_pylist())
    assert sorted(expected) == list(DAYS)  # the table spans two UTC days
    assert report["through_checkpoint"] == checkpoint and report["table_version"] == version
    assert report["days"] == {day: len(rows) for day, rows in expected.items()}
    assert rollup_rows(report["rollups"]) == expected

    quality = run_dag(monkeypatch, lake.pipelines, f"barrierflow_quality__{name}", epochs=100)
    assert quality.state == "success", quality.log[-6000:]
    outcome = next(o for o in quality.xcom("validate")["outcomes"] if o["target"] == "output")
    assert outcome["rows"] == committed.num_rows and not outcome["skipped"]  # every commit up to the cut

    rows = sorted(committed.to_pylist(), key=lambda r: (r["window_start"], r["key"]))
    row = rows[len(rows) // 2]  # a window in the middle: well inside the range the comparison closes
    alter_one_row(lake, row)
    assert lake.current_version() != version

    recompute = run_dag(monkeypatch, lake.pipelines, f"barrierflow_recompute__{name}")
    assert recompute.state == "success", recompute.log[-6000:]
    summary = recompute.xcom("compare")
    assert summary["passed"] is True and summary["stream_rows"] == summary["batch_rows"] > 20
    assert summary["checkpoint_id"] == checkpoint and summary["table_version"] == version  # the cut's, not the latest
    assert row["window_end"] < datetime.fromisoformat(summary["end"])  # the altered row is in the compared range

    original = cuts(lake).get(checkpoint)
    assert original is not None and original["totals"] is not None
    covering = original["totals"].__class__(**{**original["totals"].as_dict(), "version": lake.current_version()})
    cuts(lake).record(checkpoint, {"totals": covering})
    try:
        failed = run_dag(monkeypatch, lake.pipelines, f"barrierflow_recompute__{name}")
    finally:
        cuts(lake).record(checkpoint, original)

    assert failed.state == "failed" and failed.task_states == {"recompute": "success", "compare": "failed"}
    assert "1 output rows differ from the batch recomputation" in failed.log
    start = row["window_start"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    assert re.search(rf"changed: window \[window_start={re.escape(start)}Z, window_end=[^\]]+\] "
                     rf"key \[key={row['key']}\]", failed.log), (row, failed.log[-4000:])


def test_the_maintenance_dag_keeps_every_cut_readable(monkeypatch: pytest.MonkeyPatch, lake: TableLake) -> None:
    """``barrierflow_maintain__<name>`` with nothing young enough to spare (Iceberg: every snapshot
    old enough to expire; Delta: VACUUM retention 0 hours) leaves every cut reading what it read."""
    from barrierflow.batch.lake_cut import read_table_as_of

    def as_of_each_cut() -> dict[int, list[tuple[Any, ...]]]:
        return {c: sorted(tuple(r.values()) for r in read_table_as_of(lake.spec_path, f"{lake.name}/totals", c)
                          .to_pylist()) for c in cuts(lake).checkpoints()}

    before = as_of_each_cut()
    run = run_dag(monkeypatch, lake.pipelines, f"barrierflow_maintain__{lake.name}", older_than_hours=-1,
                  retention_hours=0)

    assert run.state == "success", run.log[-6000:]
    [table] = run.xcom("maintain")["tables"]
    assert table["committed_checkpoint"] is not None and table["restore_version"] in table["kept"]
    if lake.format == "delta":
        assert table["compacted"]["removed"] > 1 and table["compacted"]["added"] >= 1
    assert as_of_each_cut() == before
