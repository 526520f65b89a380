"""The tables DAG of a pipeline that writes an Iceberg table, run by ``dag.test()``: it returns
the cut (every table's version as of one checkpoint) the Iceberg sink recorded, checked against
the table's own snapshot history (read with pyiceberg)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.dags.conftest import parse_dags, run_dag
from tests.sinks.lake_env import PIPELINE, commit, iceberg_pipeline_spec, rows
from tests.sinks.test_iceberg_sink import make_sink


def test_the_tables_dag_returns_the_newest_cut_of_every_table(monkeypatch: pytest.MonkeyPatch, airflow_db: Path,
                                                              pipelines_dir: Path, tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1, 2]))
    commit(sink, 2, 1, rows([3]))
    shutil.copy(iceberg_pipeline_spec(tmp_path), pipelines_dir / "lakep.yaml")
    bag = parse_dags(monkeypatch, pipelines_dir)
    dag = bag.dags[f"barrierflow_tables__{PIPELINE}"]
    assert dag.timetable.asset_condition.name == f"barrierflow/{PIPELINE}/tables"  # scheduled on the tables asset

    result = run_dag(monkeypatch, pipelines_dir, f"barrierflow_tables__{PIPELINE}")
    assert result.state == "success", result.log[-3000:]
    cut = result.xcom("table_cut")
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}")
    newest = catalog.load_table("lake.totals").current_snapshot()
    assert newest is not None and newest.summary.additional_properties["barrierflow.checkpoint-id"] == "2"
    assert cut["checkpoint_id"] == 2 and cut["from"].startswith("the newest cut")
    assert cut["tables"][f"{PIPELINE}/ice"]["version"] == newest.snapshot_id
    assert cut["tables"][f"{PIPELINE}/ice"]["table"] == "lake.totals"
