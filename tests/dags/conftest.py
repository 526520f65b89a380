"""An isolated, offline Airflow for the DAG tests.

Airflow reads its configuration when it is first imported, so the environment is set here,
when pytest loads this conftest and before any test module imports ``airflow``:
a throwaway ``AIRFLOW_HOME`` (SQLite inside it, never a real metadata database), the project's
``dags/`` as the DAGs folder, no example DAGs, unit-test mode. Parsing DAGs with ``DagBag``
needs nothing else; :func:`run_dag` runs a whole DAG with Airflow's own test runner
(``dag.test()``: real task execution through the Task SDK, argument resolution, XCom,
params, trigger rules) on a metadata database created once per test process.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = PROJECT_ROOT / "dags"

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="barrierflow-airflow-home-"))
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
})


@pytest.fixture(scope="session", autouse=True)
def airflow_home() -> Iterator[Path]:
    """The temporary ``AIRFLOW_HOME`` of this test session (removed at the end)."""
    yield _AIRFLOW_HOME
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


def spec_yaml(name: str, interval: str = "4s") -> str:
    """A minimal valid pipeline spec named ``name``, checkpointing every ``interval``."""
    return f"""\
version: 1
name: {name}
sources:
  - type: generator
    partitions: 2
transformation:
  function: barrierflow.transforms.aggregations:keyed_window_counts
sinks:
  - type: discard
checkpoint:
  storage: file://var/{name}/checkpoints
  interval: {interval}
spark:
  conf:
    spark.sql.adaptive.enabled: "false"
"""


#: A spec with two mistakes the loader reports: an unknown field and a bad storage URI.
BROKEN_SPEC_YAML = spec_yaml("broken").replace("file://var/broken/checkpoints", "ftp://nowhere") + (
    "checkpoint_intervall: 5s\n"
)


@pytest.fixture
def pipelines_dir(tmp_path: Path) -> Path:
    """An empty folder for throwaway pipeline specs."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    return folder


#: The repository's example and benchmark specs, which `make airflow` and the compose stack serve.
REPO_PIPELINES = PROJECT_ROOT / "include" / "pipelines"


def parse_dags(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path | None = None) -> Any:
    """Parse dags/ into a fresh DagBag, reading specs from ``pipelines_dir`` (default: the repo's
    example specs in include/pipelines, named in BARRIERFLOW_PIPELINES_DIR as `make airflow` does)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("BARRIERFLOW_PIPELINES_DIR", str(REPO_PIPELINES if pipelines_dir is None else pipelines_dir))
    return DagBag(dag_folder=DAGS_FOLDER, safe_mode=False)


@pytest.fixture(scope="session")
def airflow_db(airflow_home: Path) -> Path:
    """The metadata database (SQLite in the temporary home), created once per test process."""
    from airflow.utils.db import resetdb

    resetdb()
    return airflow_home


@dataclass
class DagRunResult:
    """What one ``dag.test()`` run left: its state, each task's state and XCom
    ``return_value``, and everything the run printed (task logs included)."""

    dag_id: str
    run_id: str
    state: str
    task_states: dict[str, str | None]
    returned: dict[str, Any]
    log: str

    def xcom(self, task_id: str) -> Any:
        return self.returned[task_id]


def run_dag(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, dag_id: str, **conf: Any) -> DagRunResult:
    """Run DAG ``dag_id`` (specs from ``pipelines_dir``) with ``dag.test(run_conf=conf)`` and
    report what happened. Needs the :func:`airflow_db` fixture. A param the DAG's schema
    refuses raises ``ParamValidationError`` here, as the REST API refuses the trigger."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from tests.drivers import short_lived_driver_java_options

    bag = parse_dags(monkeypatch, pipelines_dir)
    assert bag.import_errors == {}
    dag = bag.dags[dag_id]
    # The spark-submits a DAG starts are short-lived drivers: C1 only, serial GC, class archive.
    monkeypatch.setenv("_JAVA_OPTIONS", short_lived_driver_java_options())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run = dag.test(run_conf=conf or None)
    with create_session() as session:
        states = {ti.task_id: (str(ti.state) if ti.state else None) for ti in run.get_task_instances(session=session)}
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id,
                                               XComModel.key == "return_value").all()
        returned = {row.task_id: row.value for row in rows}
    return DagRunResult(dag_id, run.run_id, str(run.state), states, returned, printed.getvalue())
