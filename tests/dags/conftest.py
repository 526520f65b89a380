"""An isolated, offline Airflow for the DAG tests.

Airflow reads its configuration when it is first imported, so the environment is set here,
when pytest loads this conftest and before any test module imports ``airflow``:
a throwaway ``AIRFLOW_HOME`` (SQLite inside it, never a real metadata database), no example
DAGs, unit-test mode. Parsing DAGs with ``DagBag`` needs nothing else: no ``db migrate``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="barrierflow-airflow-home-"))
os.environ.update({
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}",
})

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = PROJECT_ROOT / "dags"


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


def parse_dags(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path | None = None) -> Any:
    """Parse dags/ into a fresh DagBag, reading specs from ``pipelines_dir`` (default: the repo's)."""
    from airflow.dag_processing.dagbag import DagBag

    if pipelines_dir is None:
        monkeypatch.delenv("BARRIERFLOW_PIPELINES_DIR", raising=False)
    else:
        monkeypatch.setenv("BARRIERFLOW_PIPELINES_DIR", str(pipelines_dir))
    return DagBag(dag_folder=DAGS_FOLDER, safe_mode=False)
