"""The Airflow side of barrierflow: what ``dags/barrierflow_pipelines.py`` calls.

* :mod:`.support` — spec discovery, DAG ids, schedules, and the scheduled operations
  (supervision, verification, retention, reconciliation, skew) as the DAG tasks need them;
* :mod:`.runbook` — the triggered failure recovery, step by step;
* :mod:`.launch` — the launch operator (spark-submit with the restart guard).

Like the CLI these only check arguments, call :mod:`barrierflow.ops` and shape the result
(an XCom, an Airflow failure); :mod:`.support` and :mod:`.runbook` import nothing of Airflow,
so they are testable without it.
"""
