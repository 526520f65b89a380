"""``make airflow`` starts Airflow on 127.0.0.1 with the project's DAGs and plugins in var/airflow
(checked on the command make would run: ``make -n``; starting it for real is in docs/airflow.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_airflow_runs_standalone_on_localhost_with_the_projects_dags_and_plugins() -> None:
    # Run as a top-level make even under `make test` (no "Entering directory" lines, no inherited flags).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    dry = subprocess.run(["make", "--no-print-directory", "-n", "airflow", "AIRFLOW_PORT=8123"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"AIRFLOW_HOME={ROOT}/var/airflow" in dry
    assert f"AIRFLOW__CORE__DAGS_FOLDER={ROOT}/dags" in dry
    assert f"AIRFLOW__CORE__PLUGINS_FOLDER={ROOT}/plugins" in dry
    # The demo DAGs: the repository's example specs, named explicitly (the DAG file's default is
    # $BARRIERFLOW_HOME/pipelines, the user's own).
    assert f"BARRIERFLOW_PIPELINES_DIR={ROOT}/include/pipelines" in dry
    assert "AIRFLOW__API__HOST=127.0.0.1" in dry and "AIRFLOW__API__PORT=8123" in dry
    assert "http://127.0.0.1:8123/" in dry and "simple_auth_manager_passwords.json.generated" in dry
    assert dry.rstrip().endswith(".venv/bin/airflow standalone")
    ignored = subprocess.run(["git", "check-ignore", "var/airflow/airflow.db"], cwd=ROOT, capture_output=True,
                             text=True, timeout=30, check=False)
    assert ignored.returncode == 0, "var/airflow must be git-ignored"
