"""The tests of ``barrierflow.airflow`` import Airflow: they share the isolated, offline Airflow
of ``tests/dags`` (importing that conftest sets ``AIRFLOW_HOME`` and friends before Airflow is
imported, and the fixtures these tests use are re-exported here, as ``tests/security`` does)."""

from __future__ import annotations

from tests.dags.conftest import airflow_home, pipelines_dir

__all__ = ["airflow_home", "pipelines_dir"]
