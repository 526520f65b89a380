"""The secrets test runs DAGs with ``dag.test()``: it shares the isolated, offline Airflow of
``tests/dags`` (importing that conftest sets ``AIRFLOW_HOME`` and friends before Airflow is
imported, and its fixtures are re-exported here for the tests of this folder).

Re-exported, ``airflow_db`` is a second session fixture of the same function: a process that
runs tests of both folders resets its throwaway metadata database once more when the first
test here starts. That is harmless, as every DAG test syncs its DAGs and creates its own runs."""

from __future__ import annotations

from tests.dags.conftest import airflow_db, airflow_home

__all__ = ["airflow_db", "airflow_home"]
