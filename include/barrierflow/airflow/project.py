"""A user project's DAGs: barrierflow's DAG factory run over the project's own pipelines folder.

barrierflow's DAG factory is ``dags/barrierflow_pipelines.py`` of the barrierflow repository
(it builds every DAG of every spec in ``$BARRIERFLOW_PIPELINES_DIR`` and launches
``jobs/run_pipeline.py`` beside it, with ``BARRIERFLOW_HOME`` in the job's environment). A
project's DAG file (``barrierflow init`` writes one) calls :func:`project_dags` and puts the
result in its globals, where Airflow finds the DAGs.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import barrierflow
from barrierflow.errors import UserInputError
from barrierflow.processes import temporary_environment

__all__ = ["dag_factory_file", "project_dags"]


def dag_factory_file() -> Path:
    """``dags/barrierflow_pipelines.py`` of the barrierflow installation (a clone installed with
    ``pip install -e``, as ``make install`` does).

    Raises:
        UserInputError: it is not there (barrierflow installed from a wheel, which ships the
            library only).
    """
    root = Path(barrierflow.__file__).resolve().parents[2]
    factory = root / "dags" / "barrierflow_pipelines.py"
    if not factory.is_file() or not (root / "jobs" / "run_pipeline.py").is_file():
        raise UserInputError(f"barrierflow's DAG factory is not at {factory}: it ships with the barrierflow "
                             "repository (dags/, jobs/), not the wheel; install barrierflow from a clone "
                             "(make install, or pip install -e CLONE)")
    return factory


def project_dags(pipelines_dir: str | os.PathLike[str], *, home: str | os.PathLike[str]) -> dict[str, Any]:
    """The DAGs of every spec in ``pipelines_dir`` by DAG id, as barrierflow's own DAG file
    builds them, with ``home`` as ``BARRIERFLOW_HOME`` (where the specs' relative paths are
    taken from, in the DAGs' tasks and the launched jobs). The two variables are set only while
    the factory runs.

    Raises:
        UserInputError: ``pipelines_dir`` is not a folder; the factory is not installed
            (:func:`dag_factory_file`).
    """
    folder = Path(pipelines_dir).resolve()
    if not folder.is_dir():
        raise UserInputError(f"no pipelines folder {folder}: the project's specs go in its pipelines/ folder")
    factory = dag_factory_file()
    variables = {"BARRIERFLOW_PIPELINES_DIR": str(folder), "BARRIERFLOW_HOME": str(Path(home).resolve())}
    with temporary_environment(variables):
        built = runpy.run_path(str(factory), run_name="barrierflow_project_dags")
    from airflow.sdk import DAG

    return {name: value for name, value in built.items() if isinstance(value, DAG)}


