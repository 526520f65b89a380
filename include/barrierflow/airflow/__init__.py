"""The Airflow side of barrierflow: what ``dags/barrierflow_pipelines.py`` calls.

The DAG file keeps the configuration, the tables of DAG kinds and the loop over the discovered
pipelines; everything its DAGs run is here:

* :mod:`.task_body` — the one wrapper of every task body: ``BARRIERFLOW_HOME`` from the task's
  ``barrierflow_home`` argument, and the errors a retry cannot fix turned into
  ``AirflowFailException`` (the task fails at once, with the error's message);
* :mod:`.tasks` — the scheduled, batch and invalid-spec tasks; :mod:`.recovery_tasks` — the
  recovery DAG's tasks, its sensor and their wiring;
* :mod:`.params` — the DAGs' params; :mod:`.dag_model` — what a pipeline's DAGs are built from
  (:class:`~.dag_model.Pipeline`, its Parquet :class:`~.dag_model.Output` lakes, the rows of
  the tables of DAG kinds);
* :mod:`.support` — spec discovery, DAG ids, schedules, and the scheduled operations
  (supervision, verification, retention, 2PC reconciliation, skew, batch reports, data quality)
  as the tasks need them; :mod:`.chaos` — the chaos run's params and check;
* :mod:`.runbook` — the triggered failure recovery, step by step;
* :mod:`.launch` — the launch operator (spark-submit with the restart guard) and the batch
  jobs' operator; :mod:`.assets` — the pipeline's assets and their watcher in the triggerer.

Like the CLI these only check arguments, call :mod:`barrierflow.ops` and shape the result
(an XCom, an Airflow failure); :mod:`.support`, :mod:`.chaos` and :mod:`.runbook` import
nothing of Airflow, so they are testable without it.
"""
