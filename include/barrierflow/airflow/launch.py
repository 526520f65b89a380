"""The launch task of ``barrierflow_pipeline__<name>``: spark-submit, guarded, on the right master.

:class:`PipelineSubmitOperator` is Airflow's ``SparkSubmitOperator`` with two additions:

* **The restart guard.** Before spark-submit starts, it asks
  :func:`barrierflow.recovery.restart_guard.check_launch_allowed` (the job already runs, a
  restore is in progress, a recovery run owns the restart, or a newer restore superseded the
  one that asked for this launch) and fails at once, without retry and without starting Spark,
  with that message. What it tells the guard comes from Airflow: the run's conf and the number
  of active runs of the recovery DAG (Task SDK calls to the API server).
* **The master when there is no Spark connection.** With a ``spark_default`` connection, its
  master is used (a real cluster: ``spark://host:7077``, ``yarn``, ``k8s://...``). Without one,
  the provider would submit to ``yarn``, which fails on a fresh install; this operator submits
  to the spec's ``spark.master`` instead (``local[2]`` for the demo) and logs that it did.

The user's own code is not passed with ``--py-files``: the job ships the spec's
``spark.py_packages`` itself when it builds its session (:mod:`barrierflow.spark.user_code`),
so every job of the pipeline gets it, also those Airflow does not submit.

The job's arguments follow the run's params: ``--until-exhausted`` when ``until_exhausted``
is true (a bounded source: the job stops once everything was read and committed).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

#: States of a DAG run that count as "in progress" for the guard.
ACTIVE_RUN_STATES = ["queued", "running"]


def spark_connection_exists(conn_id: str) -> bool:
    """Whether Airflow resolves ``conn_id`` (metadata DB, environment or secrets backend)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def use_master(hook: SparkSubmitHook, master: str) -> None:
    """Point an already built hook at ``master``, with the flags the hook derives from it.

    The provider resolves its master only from a connection (default ``yarn``); this is the
    one place that overrides it, and the launch test checks the resulting spark-submit command.
    """
    hook._connection["master"] = master
    hook._is_yarn = "yarn" in master
    hook._is_yarn_cluster_mode = hook._is_yarn and hook._connection["deploy_mode"] == "cluster"
    hook._is_kubernetes = "k8s" in master
    hook._should_track_driver_status = hook._resolve_should_track_driver_status()


class SpecMasterSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` that submits to the spec's ``spark.master`` when ``conn_id`` does not
    resolve (see the module docstring); ``master_used`` records the master of the last submit."""

    def __init__(self, *, spec_master: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_master = spec_master
        self.master_used: str | None = None

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if not spark_connection_exists(self._conn_id):
            self.log.info("no Airflow connection %r: submitting to the spec's spark.master %r (create the "
                          "connection to use a cluster)", self._conn_id, self.spec_master)
            use_master(hook, self.spec_master)
        self.master_used = str(hook._connection["master"])
        return hook


class BatchSubmitOperator(SpecMasterSubmitOperator):
    """spark-submit of ``jobs/batch_job.py`` (rollups, the stream-vs-batch comparison): a batch job,
    bounded, with nothing to guard; arguments are templated (``{{ params.day }}``, ``{{ run_id }}``)."""


class PipelineSubmitOperator(SpecMasterSubmitOperator):
    """spark-submit of ``jobs/run_pipeline.py --spec SPEC`` behind the restart guard.

    Args:
        spec_path: the pipeline spec (absolute).
        spec_master: the spec's ``spark.master``, used when ``conn_id`` does not resolve.
        recovery_dag_id: the pipeline's recovery DAG, which owns restarts.
        **kwargs: as ``SparkSubmitOperator`` (``retries`` is forced to 0).
    """

    def __init__(self, *, spec_path: str, spec_master: str, recovery_dag_id: str, **kwargs: Any) -> None:
        kwargs["retries"] = 0  # the recovery DAG owns restarts (see barrierflow.recovery.restart_guard)
        super().__init__(spec_master=spec_master, **kwargs)
        self.spec_path = spec_path
        self.recovery_dag_id = recovery_dag_id

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowFailException
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        from barrierflow.recovery.restart_guard import LaunchRefusedError, check_launch_allowed

        conf = dict(getattr(context.get("dag_run"), "conf", None) or {})
        started_by = conf.get("recovery_run_id")
        active = RuntimeTaskInstance.get_dr_count(dag_id=self.recovery_dag_id, states=ACTIVE_RUN_STATES)
        starter_active = bool(started_by) and RuntimeTaskInstance.get_dagrun_state(
            dag_id=self.recovery_dag_id, run_id=str(started_by)) in ACTIVE_RUN_STATES
        try:
            self.log.info("%s", check_launch_allowed(
                self.spec_path, recovery_dag_id=self.recovery_dag_id, launch_conf=conf,
                active_recovery_runs=active, starter_active=starter_active))
        except LaunchRefusedError as exc:
            raise AirflowFailException(str(exc)) from exc
        args = ["--spec", self.spec_path]
        if bool(context["params"].get("until_exhausted")):
            args.append("--until-exhausted")
        self.application_args = args
        self._hook = None  # built anew with these arguments
        super().execute(context)
