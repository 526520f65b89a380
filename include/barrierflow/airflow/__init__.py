"""The Airflow side of barrierflow: what ``dags/barrierflow_pipelines.py`` calls.

The DAG file keeps the configuration, the tables of DAG kinds and the loop over the discovered
pipelines; everything its DAGs run is here:

* :mod:`.task_body` — the one wrapper of every task body: ``BARRIERFLOW_HOME`` from the task's
  ``barrierflow_home`` argument, and the errors a retry cannot fix turned into
  ``AirflowFailException`` (the task fails at once, with the error's message);
* :mod:`.tasks` — the scheduled, batch and invalid-spec tasks, each calling one operation of
  :mod:`barrierflow.ops` (retain, stop, reconcile, skew, quality, the batch reports' read);
  :mod:`.recovery_tasks` — the recovery DAG's tasks, its sensor and their wiring;
* :mod:`.params` — the DAGs' params; :mod:`.dag_model` — what a pipeline's DAGs are built from
  (:class:`~.dag_model.Pipeline`, its Parquet :class:`~.dag_model.Output` lakes, the rows of
  the tables of DAG kinds);
* where the Airflow side adds a rule of its own to an operation, one module per concept:
  :mod:`.freshness` (supervision), :mod:`.verification` (its schedule and one run),
  :mod:`.chaos` (the chaos run's params and check);
  :mod:`.dag_ids` — DAG ids; :mod:`.launch_defaults` — what the launch DAG derives from a
  spec; :mod:`.errors` — the errors of the Airflow side (spec discovery is
  :mod:`barrierflow.ops.discovery`);
* :mod:`.runbook` — the triggered failure recovery, step by step;
* :mod:`.notifier` — the alerts of a failed task (an Airflow ``BaseNotifier``, every task's
  ``on_failure_callback`` when the spec has an ``alerts`` block);
* :mod:`.launch` — the launch operator (spark-submit with the restart guard) and the batch
  jobs' operator; :mod:`.assets` — the pipeline's assets and their watcher in the triggerer.

Like the CLI these only check arguments, call :mod:`barrierflow.ops` and shape the result
(an XCom, an Airflow failure); :mod:`.freshness`, :mod:`.verification` and :mod:`.runbook`
import nothing of Airflow, so they are testable without it.
"""
