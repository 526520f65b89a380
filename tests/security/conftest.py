"""The secrets test runs DAGs with ``dag.test()``: it shares the isolated, offline Airflow of
``tests/dags`` (importing that conftest sets ``AIRFLOW_HOME`` and friends before Airflow is
imported, and its fixtures are re-exported here for the tests of this folder)."""

from __future__ import annotations

from tests.dags.conftest import airflow_db, airflow_home

__all__ = ["airflow_db", "airflow_home"]
