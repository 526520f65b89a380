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

**Detached, then deferred (client deploy mode, the default: local and standalone masters).**
:class:`PipelineSubmitOperator` does not run spark-submit as its child: it starts it through
the detached launcher (:mod:`barrierflow.ops.detached_launch`: its own session, output to
``<work_dir>/launches/<launch_id>.log``, the spec's restart strategy applied between
attempts, the exit status recorded beside the log) and defers to
:class:`~barrierflow.airflow.supervision.PipelineWatchTrigger`, which watches the launch, the
lease's heartbeat and the checkpoints from the triggerer. The task holds no worker slot while
the pipeline runs, and a restart of the worker, the scheduler, the triggerer or the API server
does not stop the pipeline (the trigger is rebuilt from the metadata database and looks
again). The task ends with the trigger's verdict: success when the job ended with exit 0;
failed (not retried) naming the cause, the exit code, the log file and the restart strategy's
outcome; failed as *stalled* when no checkpoint completed for the run's param
``stall_after_seconds``. Clearing or killing the task instance does not stop the pipeline
(stop it with the stop DAG, ``barrierflow stop SPEC``, which ends it with exit 0, or with
``kill <launcher pid>``, SIGTERM: the pid is in the launch record and in the task log); a
second launch meanwhile is refused by the lease and by the running launcher.

**Cluster deploy mode (Kubernetes, YARN): submitted, then deferred.** The cluster manager hosts
the driver. The task submits the application under a name of barrierflow's choosing (the driver
pod's name, or a YARN application tag) with ``waitAppCompletion=false``, so spark-submit returns
once the cluster manager has it, and defers to
:class:`~barrierflow.airflow.cluster_supervision.ClusterAppWatchTrigger`, which asks the cluster
manager's REST API for the application's state and the checkpoint store for the pipeline's
progress; the task holds no worker slot meanwhile and ends with the same verdicts.
"""

from __future__ import annotations

import collections
import os
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

#: States of a DAG run that count as "in progress" for the guard.
ACTIVE_RUN_STATES = ["queued", "running"]
#: The launch's ``stall_after_seconds`` when the run's params have none.
DEFAULT_STALL_AFTER_SECONDS = 600.0
#: Lines of the detached job's log shown in the launch task's log when the watch ends.
JOB_LOG_TAIL_LINES = 200


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
    bounded, with nothing to guard; arguments are templated (``{{ params.day }}``, ``{{ run_id }}``).
    With ``spec_path`` (and ``stage``, a final stage), the jars its recomputation needs from the
    start (Spark's Kafka connector, to read a Kafka source again:
    :func:`barrierflow.ops.batch.batch_jars`) are added to ``--jars`` when it runs."""

    def __init__(self, *, spec_path: str | None = None, stage: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.stage = stage

    def execute(self, context: Any) -> Any:
        if self.spec_path is not None:
            from airflow.sdk.exceptions import AirflowFailException

            from barrierflow.errors import BarrierflowError
            from barrierflow.ops.batch import batch_jars

            try:
                needed = batch_jars(self.spec_path, self.stage)
            except BarrierflowError as exc:
                raise AirflowFailException(f"not submitting the batch job of {self.spec_path}: {exc}") from exc
            given = [jar for jar in (self.jars or "").split(",") if jar]
            self.jars = ",".join(dict.fromkeys([*given, *needed])) or None
            self._hook = None  # built anew with these jars
        return super().execute(context)


class PipelineSubmitOperator(SpecMasterSubmitOperator):
    """spark-submit of ``jobs/run_pipeline.py --spec SPEC`` behind the restart guard.

    Args:
        spec_path: the pipeline spec (absolute).
        spec_master: the spec's ``spark.master``, used when ``conn_id`` does not resolve.
        recovery_dag_id: the pipeline's recovery DAG, which owns restarts.
        watch_poll_seconds: how often the trigger looks at the running pipeline.
        **kwargs: as ``SparkSubmitOperator`` (``retries`` is forced to 0).
    """

    def __init__(self, *, spec_path: str, spec_master: str, recovery_dag_id: str, watch_poll_seconds: float = 10.0,
                 **kwargs: Any) -> None:
        kwargs["retries"] = 0  # the recovery DAG owns restarts (see barrierflow.recovery.restart_guard)
        super().__init__(spec_master=spec_master, **kwargs)
        self.spec_path = spec_path
        self.recovery_dag_id = recovery_dag_id
        self.watch_poll_seconds = watch_poll_seconds

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
        self.jars = self._source_jars()
        self._hook = None  # built anew with these arguments
        hook = self._get_hook()
        if hook._connection["deploy_mode"] == "cluster":
            self._submit_to_cluster_and_defer(hook, context)
            return
        self._start_and_defer(hook, context)

    def _source_jars(self) -> str | None:
        """``--jars``: the installed JVM artifacts the spec's sources need (Spark's Kafka connector
        for ``reader: spark``), with whatever jars the task was given; a driver that spark-submit
        starts has its class path fixed before the job's session asks for them.

        Raises:
            AirflowFailException: the spec does not load, or a needed jar is not installed (naming
                ``make install``).
        """
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.errors import BarrierflowError
        from barrierflow.ops.run import submit_jars

        try:
            needed = submit_jars(self.spec_path)
        except BarrierflowError as exc:
            raise AirflowFailException(f"not launching {self.spec_path}: {exc}") from exc
        given = [jar for jar in (self.jars or "").split(",") if jar]
        return ",".join(dict.fromkeys([*given, *needed])) or None

    def _start_and_defer(self, hook: SparkSubmitHook, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.airflow.supervision import PipelineWatchTrigger
        from barrierflow.lease import default_ttl
        from barrierflow.ops.detached_launch import live_launches, start_detached

        home = str((self.env_vars or {}).get("BARRIERFLOW_HOME") or os.environ.get("BARRIERFLOW_HOME") or "")
        if home:
            os.environ.setdefault("BARRIERFLOW_HOME", home)
        running = live_launches(self.spec_path)
        if running:
            raise AirflowFailException(
                f"not launching {self.spec_path}: its launcher pid {running[0].pid} on {running[0].host} still runs "
                f"(launch {running[0].launch_id}, log {running[0].log}; between two restarts it holds no lease); "
                f"wait for it or stop it first (kill {running[0].pid})")
        command = hook._build_spark_submit_command(self.application)  # also resolves hook._env
        env = {**os.environ, **{k: str(v) for k, v in (hook._env or {}).items()}}
        record = start_detached(self.spec_path, command, env=env)
        stall_after = float(context["params"].get("stall_after_seconds") or DEFAULT_STALL_AFTER_SECONDS)
        self.log.info("started the pipeline detached: launcher pid %d on %s (stop it with `kill %d`), log %s, "
                      "launch record %s; spark-submit cmd: %s", record.pid, record.host, record.pid, record.log,
                      record.path, hook._mask_cmd(command))
        self.log.info("deferring to the triggerer: success when the job ends with exit 0, failure when it fails or "
                      "no checkpoint completes for %g s", stall_after)
        self.defer(trigger=PipelineWatchTrigger(record_path=str(record.path), barrierflow_home=home,
                                                stall_after_seconds=stall_after,
                                                lost_after_seconds=max(stall_after, 3 * default_ttl()),
                                                poll_seconds=self.watch_poll_seconds),
                   method_name="execute_complete")

    def _submit_to_cluster_and_defer(self, hook: SparkSubmitHook, context: Any) -> None:
        """Cluster deploy mode on Kubernetes or YARN: submit the application under a name of
        barrierflow's choosing with ``waitAppCompletion=false`` (spark-submit returns once the
        cluster manager has it), then defer to
        :class:`~barrierflow.airflow.cluster_supervision.ClusterAppWatchTrigger`, which asks the
        cluster manager's REST API and the pipeline's checkpoints from the triggerer."""
        from datetime import UTC, datetime

        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

        from barrierflow.airflow.cluster_supervision import ClusterAppWatchTrigger
        from barrierflow.errors import BarrierflowError
        from barrierflow.lease import default_ttl
        from barrierflow.spark.cluster_apps import cluster_app_for

        try:
            extra = BaseHook.get_connection(self._conn_id).extra_dejson
        except AirflowNotFoundException:
            extra = {}
        launch_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + os.urandom(4).hex()
        try:
            app = cluster_app_for(str(hook._connection["master"]), pipeline=str(self.name or "pipeline"),
                                  launch_id=launch_id,
                                  namespace=hook._connection.get("namespace"),
                                  yarn_rm_url=extra.get("yarn_resourcemanager_webapp_address"))
        except BarrierflowError as exc:
            raise AirflowFailException(f"not launching {self.spec_path}: {exc}") from exc
        hook._conf = {**(hook._conf or {}), **app.submit_conf()}
        home = str((self.env_vars or {}).get("BARRIERFLOW_HOME") or os.environ.get("BARRIERFLOW_HOME") or "")
        self.log.info("cluster deploy mode: submitting %s; the task then defers while the cluster manager hosts "
                      "the driver", app.describe())
        if app.manager == "kubernetes":
            # The provider then skips its check of the driver's exit code, which a submit that does not
            # wait never prints; the trigger below is what tracks the driver pod.
            hook._track_driver_via_k8s_api = True
        hook.submit(self.application)
        submitted_at = datetime.now(UTC).isoformat()
        stall_after = float(context["params"].get("stall_after_seconds") or DEFAULT_STALL_AFTER_SECONDS)
        self.defer(trigger=ClusterAppWatchTrigger(
            app=app.as_dict(), spec_path=self.spec_path,
            barrierflow_home=home, submitted_at=submitted_at,
            stall_after_seconds=stall_after, lost_after_seconds=max(stall_after, 3 * default_ttl()),
            poll_seconds=max(self.watch_poll_seconds, 20.0)), method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """The trigger's verdict: returned (XCom) when the job finished, else the task fails with
        its message, not retried."""
        from airflow.sdk.exceptions import AirflowFailException

        if event and event.get("log"):
            self._show_job_log(str(event["log"]))
        if not event or event.get("outcome") != "finished":
            raise AirflowFailException(str((event or {}).get("message") or f"no verdict from the watch: {event!r}"))
        self.log.info("%s", event["message"])
        return event

    def _show_job_log(self, path: str) -> None:
        """The end of the detached job's log (its last :data:`JOB_LOG_TAIL_LINES` lines) in the
        task's log, so the job's summary and its error are where an operator looks first."""
        try:
            with open(path, encoding="utf-8", errors="replace") as log_file:
                tail = collections.deque(log_file, maxlen=JOB_LOG_TAIL_LINES)
        except OSError as exc:
            self.log.warning("the job's log %s could not be read: %s", path, exc)
            return
        self.log.info("the last %d line(s) of the job's log %s:\n%s", len(tail), path, "".join(tail).rstrip())

    def on_kill(self) -> None:
        """Nothing to kill here: the pipeline runs detached and outlives this task (see the
        module docstring); in cluster deploy mode the provider's own on_kill."""
        if self._hook is not None and self._hook._connection["deploy_mode"] == "cluster":
            super().on_kill()
            return
        self.log.info("the pipeline runs detached from this task and keeps running; stop it with its stop DAG "
                      "(barrierflow stop SPEC) or its launcher with SIGTERM")
