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

Every spark-submit these operators build (the launch and the batch jobs) in client deploy mode
runs a driver JVM that does not look up Python data sources, as the drivers barrierflow starts
itself (:func:`barrierflow.spark.session.launching_jvm`; :func:`skip_python_data_source_lookup`).

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

**A lost host, relaunched (a spec with a ``restart:`` block).** When the watch reports the
launcher ``lost`` (gone without an exit record, and the pipeline's lease no longer live: while
it heartbeats, the old driver may still run on a partitioned host, and the watch keeps waiting),
:meth:`PipelineSubmitOperator.execute_complete` counts the loss in the launch chain's restart
ledger (:mod:`barrierflow.ops.relaunch`: the spec's strategy, the budget the launcher's own
restarts share; the ``restart`` alert), waits the strategy's delay (deferred when it is at least
:data:`DEFER_DELAY_FROM_SECONDS`), then
(:meth:`PipelineSubmitOperator.relaunch`, on whichever worker resumes the task) restores the
latest valid checkpoint (refused while a lease holder is live: the task watches again), starts a
new launcher of the same chain and defers to its watch. Past the budget the task fails naming
the strategy and every cause (the ``gave_up`` alert sent). Without a ``restart:`` block a lost
launcher fails the task, as before.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

#: States of a DAG run that count as "in progress" for the guard.
ACTIVE_RUN_STATES = ["queued", "running"]
#: The launch's ``stall_after_seconds`` when the run's params have none.
DEFAULT_STALL_AFTER_SECONDS = 600.0
#: Lines of the detached job's log shown in the launch task's log when the watch ends.
JOB_LOG_TAIL_LINES = 200
#: Set to ``true`` where the pipelines' work dirs are on a volume every Airflow worker and the
#: triggerer mount at the same path (needed to relaunch after a lost host with an executor
#: whose workers run on several hosts).
SHARED_WORK_DIR_ENV = "BARRIERFLOW_SHARED_WORK_DIR"
#: A relaunch delay at least this long is waited deferred (no worker slot); a shorter one on the worker.
DEFER_DELAY_FROM_SECONDS = 60.0
#: Executors whose task processes all run on the scheduler's host.
ONE_HOST_EXECUTORS = ("LocalExecutor", "SequentialExecutor", "DebugExecutor")


def relaunch_layout_problem(executor: str, work_dir: str, shared: str | None) -> str | None:
    """Why a relaunch after a lost host cannot work in this layout, or None: with an executor
    whose workers may run on other hosts (anything but :data:`ONE_HOST_EXECUTORS`), the lost
    launch's records in ``work_dir`` must be readable there, which only the deployment knows:
    it says so with :data:`SHARED_WORK_DIR_ENV` ``=true``."""
    names = [name.strip().rsplit(".", 1)[-1].split(":")[0] for name in executor.split(",") if name.strip()]
    if all(name in ONE_HOST_EXECUTORS for name in names) or (shared or "").strip().lower() in ("1", "true", "yes"):
        return None
    return (f"the spec's restart: block relaunches the pipeline after a lost host on whichever worker resumes the "
            f"launch task, and the executor {executor!r} may run it on another host, which must read the lost "
            f"launch's records in the work_dir {work_dir}: put work_dir on a volume every worker and the triggerer "
            f"mount at the same path and set {SHARED_WORK_DIR_ENV}=true in their environment (or remove the restart: "
            "block; the recovery DAG then brings a lost pipeline back)")


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


def skip_python_data_source_lookup(hook: SparkSubmitHook) -> None:
    """In client deploy mode, submit so that the driver JVM skips Spark's lookup of Python data
    sources (a Python worker daemon at its first data source lookup that imports every
    ``pyspark_*`` package; barrierflow registers its sources by name: 0.6-0.7 core-seconds and
    about 0.8 s of every driver start). The JVM looks only if the command in its
    ``PYSPARK_DRIVER_PYTHON`` exists, while spark-submit runs the Python driver with
    ``spark.pyspark.driver.python`` first: the conf gets the Python that spark-submit would have
    chosen (the conf's, else ``spark.pyspark.python``, else the environment's
    ``PYSPARK_DRIVER_PYTHON``, else ``PYSPARK_PYTHON``), the environment the name that turns the
    lookup off. A pip-installed ``spark-submit`` runs ``PYSPARK_DRIVER_PYTHON`` to find its
    ``SPARK_HOME`` when that is not set, so the submit gets ``SPARK_HOME`` too: the pyspark this
    Python finds, which is what that script answers.

    Only where that is known to change nothing else: local and standalone masters in client mode
    (on YARN and Kubernetes the provider turns the environment into the driver's settings; in
    cluster mode the conf travels to a driver on another host), and a driver Python that is this
    process's own unless ``SPARK_HOME`` is set (another Python could find another Spark); not
    when the submit already turns the lookup off."""
    from barrierflow.spark.session import NO_PYTHON_DATA_SOURCE_LOOKUP

    if hook._is_yarn or hook._is_kubernetes or hook._connection.get("deploy_mode") == "cluster":
        return
    conf = dict(hook._conf or {})
    given = {k: str(v) for k, v in (hook._env_vars or {}).items()}
    env = {**os.environ, **given}
    python = (conf.get("spark.pyspark.driver.python") or conf.get("spark.pyspark.python")
              or env.get("PYSPARK_DRIVER_PYTHON") or env.get("PYSPARK_PYTHON") or "python3")
    if python == NO_PYTHON_DATA_SOURCE_LOOKUP:
        return
    home: dict[str, str] = {}
    if not env.get("SPARK_HOME"):
        found = importlib.util.find_spec("pyspark")
        if python != sys.executable or found is None or found.origin is None:
            return
        home = {"SPARK_HOME": str(Path(found.origin).parent)}
    hook._conf = {**conf, "spark.pyspark.driver.python": str(python)}
    hook._env_vars = {**(hook._env_vars or {}), **home, "PYSPARK_DRIVER_PYTHON": NO_PYTHON_DATA_SOURCE_LOOKUP}


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
        skip_python_data_source_lookup(hook)
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

    def _start_and_defer(self, hook: SparkSubmitHook, context: Any, *, chain: str = "") -> None:
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.ops.detached_launch import live_launches, start_detached

        home = self._home()
        self._refuse_unshared_work_dir()
        running = live_launches(self.spec_path)
        if running:
            raise AirflowFailException(
                f"not launching {self.spec_path}: its launcher pid {running[0].pid} on {running[0].host} still runs "
                f"(launch {running[0].launch_id}, log {running[0].log}; between two restarts it holds no lease); "
                f"wait for it or stop it first (kill {running[0].pid})")
        command = hook._build_spark_submit_command(self.application)  # also resolves hook._env
        env = {**os.environ, **{k: str(v) for k, v in (hook._env or {}).items()}}
        record = start_detached(self.spec_path, command, env=env, chain=chain)
        self.log.info("started the pipeline detached: launcher pid %d on %s (stop it with `kill %d`), log %s, "
                      "launch record %s; spark-submit cmd: %s", record.pid, record.host, record.pid, record.log,
                      record.path, hook._mask_cmd(command))
        self._watch(str(record.path), context, home)

    def _refuse_unshared_work_dir(self) -> None:
        """Fail (no retry) when the spec relaunches after lost hosts and the layout cannot
        (:func:`relaunch_layout_problem`)."""
        from airflow.sdk.configuration import conf
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.pipeline.model import open_pipeline

        pipeline = open_pipeline(self.spec_path)
        if pipeline.spec.restart is None:
            return
        problem = relaunch_layout_problem(str(conf.get("core", "executor", fallback="LocalExecutor")),
                                          str(pipeline.work_dir), os.environ.get(SHARED_WORK_DIR_ENV))
        if problem:
            raise AirflowFailException(f"not launching {self.spec_path}: {problem}")

    def _home(self) -> str:
        home = str((self.env_vars or {}).get("BARRIERFLOW_HOME") or os.environ.get("BARRIERFLOW_HOME") or "")
        if home:
            os.environ.setdefault("BARRIERFLOW_HOME", home)
        return home

    def _watch(self, record_path: str, context: Any, home: str) -> None:
        """Defer to the watch of the launch at ``record_path``; a spec with a ``restart:`` block
        has a lost launcher relaunched (``lost``) rather than failed."""
        from barrierflow.airflow.supervision import PipelineWatchTrigger
        from barrierflow.lease import default_ttl
        from barrierflow.spec.loader import load_any_spec

        relaunch = load_any_spec(self.spec_path).restart is not None
        stall_after = float(context["params"].get("stall_after_seconds") or DEFAULT_STALL_AFTER_SECONDS)
        self.log.info("deferring to the triggerer: success when the job ends with exit 0, failure when it fails or "
                      "no checkpoint completes for %g s%s", stall_after,
                      "; a lost launcher (host or container lost) is relaunched by the restart strategy once the "
                      "pipeline's lease expired" if relaunch else "")
        self.defer(trigger=PipelineWatchTrigger(record_path=record_path, barrierflow_home=home,
                                                stall_after_seconds=stall_after,
                                                lost_after_seconds=max(stall_after, 3 * default_ttl()),
                                                poll_seconds=self.watch_poll_seconds, relaunch=relaunch),
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
        if event and event.get("outcome") == "lost":
            self._after_loss(context, event)
        if not event or event.get("outcome") != "finished":
            raise AirflowFailException(str((event or {}).get("message") or f"no verdict from the watch: {event!r}"))
        self.log.info("%s", event["message"])
        return event

    def _after_loss(self, context: Any, event: dict[str, Any]) -> None:
        """The launcher was lost and its lease is not live: count the loss against the restart
        strategy (the chain's ledger), then relaunch after its delay, or fail past the budget
        (the ``gave_up`` alert sent). Never returns: defers or raises."""
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.errors import BarrierflowError
        from barrierflow.lease import JobAlreadyRunningError
        from barrierflow.ops.relaunch import decide_relaunch

        home = self._home()
        record_path = str(event["record_path"])
        try:
            decision = decide_relaunch(record_path, str(event.get("message") or "the launcher was lost"))
        except JobAlreadyRunningError as exc:
            self.log.warning("%s; watching again", exc)
            self._watch(record_path, context, home)
        except BarrierflowError as exc:
            raise AirflowFailException(str(exc)) from exc
        if decision.delay is None:
            raise AirflowFailException(decision.message)
        self.log.info("%s", decision.message)
        if decision.delay < DEFER_DELAY_FROM_SECONDS:
            # A deferral that resumes within seconds races the scheduler's bookkeeping of the
            # deferral itself (it then marks the resumed task failed): a short delay is waited here.
            time.sleep(decision.delay)
            self.relaunch(context, None, record_path=record_path)
        self.defer(trigger=DateTimeTrigger(moment=datetime.now(UTC) + timedelta(seconds=decision.delay)),
                   method_name="relaunch", kwargs={"record_path": record_path})

    def relaunch(self, context: Any, event: Any = None, *, record_path: str) -> None:
        """After the strategy's delay: restore the latest valid checkpoint (verified, the sinks'
        in-doubt transactions decided, under the lease: refused while the old lease is live),
        start a new launcher of the same chain on this worker and defer to its watch."""
        from airflow.sdk.exceptions import AirflowFailException

        from barrierflow.errors import BarrierflowError
        from barrierflow.lease import JobAlreadyRunningError
        from barrierflow.ops.relaunch import read_lost_launch
        from barrierflow.ops.restore import restore
        from barrierflow.verification.choice import LATEST_VALID

        home = self._home()
        try:
            lost = read_lost_launch(record_path)
        except BarrierflowError as exc:
            raise AirflowFailException(str(exc)) from exc
        if not lost.spec_path == self.spec_path:
            raise AirflowFailException(f"the lost launch {record_path} is of {lost.spec_path}, not {self.spec_path}")
        if any(self._completed_cuts()):
            try:
                outcome = restore(self.spec_path, LATEST_VALID)
            except JobAlreadyRunningError as exc:
                self.log.warning("not relaunching yet: %s; watching the lost launch again", exc)
                self._watch(record_path, context, home)
            except BarrierflowError as exc:
                raise AirflowFailException(f"not relaunching {self.spec_path}: its restore failed: {exc}") from exc
            self.log.info("restored %s %d (attempt %d) before the relaunch: %s", outcome.noun, outcome.checkpoint_id,
                          outcome.attempt, outcome.as_dict())
        else:
            self.log.info("no completed checkpoint yet: the relaunched job starts from the beginning")
        args = ["--spec", self.spec_path]
        if bool(context["params"].get("until_exhausted")):
            args.append("--until-exhausted")
        self.application_args = args
        self.jars = self._source_jars()
        self._hook = None
        self._start_and_defer(self._get_hook(), context, chain=lost.chain_id)

    def _completed_cuts(self) -> list[int]:
        from barrierflow.pipeline.model import open_pipeline

        return list(open_pipeline(self.spec_path).cuts.completed_ids())

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
