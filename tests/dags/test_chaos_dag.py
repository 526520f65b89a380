"""The chaos DAG (``barrierflow_chaos__<name>``, triggered by hand) run the way Airflow runs it,
with ``dag.test()``: a real chaos run on scratch copies of a small bounded pipeline, one kill,
the summary in the task log, the JSON as XCom, the report in the pipeline's store (where the
Checkpoints page links to it); a bad param refused by the DAG's schema; a spec chaos cannot
judge failing the task with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.dags.conftest import run_dag
from tests.scenarios.harness import windowed_spec

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.spark, pytest.mark.slow(60)]


def _spec(tmp_path: Path, pipelines_dir: Path, **source: object) -> str:
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"},
                         records=600, per_batch=100, event_time_step_ms=10)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["sources"][0].update(source)
    data["sources"][0] = {k: v for k, v in data["sources"][0].items() if v is not None}
    data["chaos"] = {"dag": True}  # the chaos DAG is made for a spec that opts in only
    (pipelines_dir / "p.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    shutil.rmtree(tmp_path / "work", ignore_errors=True)
    return str(data["name"])


def test_the_chaos_dag_runs_chaos_and_reports_it(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="barrierflow.airflow.chaos")
    name = _spec(tmp_path, pipelines_dir)
    run = run_dag(monkeypatch, pipelines_dir, f"barrierflow_chaos__{name}", kills=1, seed=0, point_share=1.0,
                  scratch=str(tmp_path / "scratch"))
    assert run.state == "success", run.log[-5000:]
    summary = run.xcom("chaos")
    assert summary["passed"] is True and summary["kills"] == {"point": 1}
    assert (summary["missing"], summary["extra"], summary["duplicated"]) == (0, 0, 0)
    task_log = run.log + caplog.text  # the task's log lines
    assert "chaos PASSED" in task_log and "missing 0, extra 0, duplicated 0" in task_log
    assert (tmp_path / "checkpoints" / "reports" / "chaos-latest.html").is_file()


def test_the_chaos_dag_refuses_a_bad_param_and_a_spec_it_cannot_judge(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    name = _spec(tmp_path, pipelines_dir, records_per_partition=None)
    with pytest.raises(ParamValidationError, match="kills"):
        run_dag(monkeypatch, pipelines_dir, f"barrierflow_chaos__{name}", kills=0)
    run = run_dag(monkeypatch, pipelines_dir, f"barrierflow_chaos__{name}", kills=1)
    assert run.state == "failed" and run.task_states["chaos"] == "failed"
    assert "generator source 'events' is unbounded; set records_per_partition" in run.log
