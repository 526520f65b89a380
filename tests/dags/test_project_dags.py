"""The DAG file ``barrierflow init`` writes: barrierflow's DAG factory over the project's
pipelines/ folder, with the project as ``BARRIERFLOW_HOME`` (barrierflow.airflow.project)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from barrierflow.errors import UserInputError
from barrierflow.ops.new_project import init_project


def test_the_project_dag_file_builds_the_pipelines_dags(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    project = init_project("demo2", tmp_path).folder
    before = {name: os.environ.get(name) for name in ("BARRIERFLOW_PIPELINES_DIR", "BARRIERFLOW_HOME")}
    bag = DagBag(dag_folder=project / "airflow", safe_mode=False)
    assert bag.import_errors == {}
    assert {"barrierflow_pipeline__demo2", "barrierflow_supervise__demo2", "barrierflow_verify__demo2",
            "barrierflow_recover__demo2", "barrierflow_rollup__demo2"} <= set(bag.dag_ids)
    assert all(dag_id.endswith("__demo2") for dag_id in bag.dag_ids)  # only the project's pipelines
    launch = bag.dags["barrierflow_pipeline__demo2"].get_task("launch")
    assert launch.application_args == ["--spec", str(project / "pipelines" / "demo2.yaml")]
    assert launch.env_vars["BARRIERFLOW_HOME"] == str(project)  # the spec's relative paths: the project's
    assert Path(launch.application).name == "run_pipeline.py" and Path(launch.application).is_file()
    # The factory's variables were set only while it ran.
    assert {name: os.environ.get(name) for name in before} == before


def test_a_missing_pipelines_folder_is_named(tmp_path: Path) -> None:
    from barrierflow.airflow.project import project_dags

    with pytest.raises(UserInputError, match="no pipelines folder"):
        project_dags(tmp_path / "nowhere", home=tmp_path)
