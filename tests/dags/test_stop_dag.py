"""``barrierflow_stop__<name>``: the running job stops with a savepoint from Airflow.

Nothing running: the task fails at once, saying so. A job started as a driver subprocess (as
the launch DAG's spark-submit would): the DAG's ``stop`` task waits until it stopped, its XCom
names the savepoint and its location, and the driver exits 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.spec import load_spec

from tests.dags.conftest import run_dag
from tests.ops.test_stop import _driver, _ended, _single_spec, _wait_for

pytestmark = pytest.mark.usefixtures("airflow_db")
DAG = "barrierflow_stop__stoppable"


def test_the_stop_dag_fails_at_once_when_nothing_runs(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path) -> None:
    _single_spec(tmp_path, pipelines_dir)
    run = run_dag(monkeypatch, pipelines_dir, DAG)
    assert run.state == "failed"
    assert run.task_states["stop"] == "failed"
    assert "pipeline stoppable is not running: no live lease in " in run.log, run.log[-3000:]


@pytest.mark.spark
@pytest.mark.slow(60)
@pytest.mark.timeout(900)
def test_the_stop_dag_stops_the_job_with_a_savepoint(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path) -> None:
    spec_path = _single_spec(tmp_path, pipelines_dir)
    driver = _driver(spec_path)
    try:
        _wait_for(lambda: (tmp_path / "chk" / manifest_key(1)).is_file(), "the first checkpoint", driver)
        run = run_dag(monkeypatch, pipelines_dir, DAG, savepoint=True, timeout_seconds=300)
    finally:
        code, out, err = _ended(driver, 120)  # killed if it did not stop by then
    assert run.state == "success", f"{run.log[-3000:]}\ndriver ({code}):\n{out}\n{err[-3000:]}"
    assert code == 0, f"{code}\n{out}\n{err[-3000:]}"
    summary: dict[str, Any] = run.xcom("stop")
    store = CheckpointStore.for_spec(load_spec(spec_path))
    assert summary["status"] == "stopped" and summary["savepoint"] == max(store.checkpoint_ids())
    assert summary["location"] == f"file://{tmp_path / 'chk' / manifest_key(summary['savepoint'])}"
    assert store.get(summary["savepoint"]).kind is CheckpointKind.SAVEPOINT
    assert f"stopped with savepoint {summary['savepoint']} " in out
