"""The tasks of the recovery DAG (``barrierflow_recover__<name>``), one per step of the runbook.

The steps themselves are the Airflow-free functions of :mod:`.runbook`; here they become
tasks, each task body wrapped in :func:`.task_body.task_body` (``BARRIERFLOW_HOME`` from the
argument ``barrierflow_home``; a :class:`~barrierflow.errors.UserInputError` (bad param, running
job, checkpoint that does not verify, duplicate output) fails the task at once: a retry cannot
fix the input). :func:`recovery_tasks`, called inside the recovery DAG, wires them in order::

    check_params_and_job -> choose_checkpoint -> restore -> restart (TriggerDagRunOperator,
    pre_execute=skip_unless_restart) -> wait_for_first_checkpoint (FirstCheckpointSensor, deferred to
    the triggerer) -> report
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import BaseSensorOperator, PokeReturnValue, TriggerRule, task

from barrierflow.airflow import runbook
from barrierflow.airflow.task_body import task_body
from barrierflow.airflow.tasks import current_context
from barrierflow.errors import UserInputError
from barrierflow.ops.restore import DuplicateOutputError

log = logging.getLogger(__name__)

# The runbook's steps are looked up in their module when a task runs (``runbook.restore_checkpoint``),
# not bound here: a test may replace one there.


@task(task_id="check_params_and_job", retries=0)
@task_body(UserInputError)
def check_params_and_job(spec_path: str, barrierflow_home: str, launch_dag_id: str) -> dict[str, Any]:
    """Validate the run's params and check the job is stopped; returns the validated params.

    Fails at once (AirflowFailException, no retry) on a bad param, naming it, its value and what
    is allowed, and while the job holds its lease, saying how to stop it."""
    from barrierflow.recovery.restart_guard import mark_recovery

    context = current_context()
    params = runbook.validate_recovery_params(context["params"])
    log.info("%s", runbook.ensure_job_stopped(spec_path, launch_dag_id=launch_dag_id))
    # Names this run to a launch that the guard refuses while it is active (restart_guard.py).
    marker = mark_recovery(spec_path, context["dag"].dag_id, context["run_id"])
    log.info("recovery %s owns the restart of the job until it ends", marker.describe())
    log.info("recovery params: %s", json.dumps(params.as_dict()))
    return params.as_dict()


@task(task_id="choose_checkpoint")
@task_body(UserInputError)
def choose_checkpoint(spec_path: str, barrierflow_home: str, recovery: dict[str, Any]) -> dict[str, Any]:
    """Resolve the param `checkpoint` (`recovery`: the params `check_params_and_job` validated,
    from XCom; not named `params`, which Airflow reserves for the context) to a checkpoint id; returns
    `{"requested", "checkpoint_id", "skipped": [{"checkpoint_id", "reason"}], "verification"}`.

    Fails at once, naming the checkpoint and each failed check, when "latest" or the id does
    not pass structural verification, and when no checkpoint exists or passes."""
    choice = runbook.choose_checkpoint(spec_path, runbook.validate_recovery_params(recovery).checkpoint)
    for skipped, why in choice.skipped:
        log.warning("skipped checkpoint %d: %s", skipped, why)
    log.info("chose checkpoint %d (checkpoint=%r): %s", choice.checkpoint_id, choice.requested, choice.verification)
    return choice.as_dict()


def _duplicate_output_hint(exc: BaseException, arguments: Mapping[str, Any]) -> str | None:
    """How to go on with this DAG after a DuplicateOutputError (the library's message comes first)."""
    return runbook.duplicate_output_hint(arguments["spec_path"]) if isinstance(exc, DuplicateOutputError) else None


@task(task_id="restore")
@task_body(UserInputError, hint=_duplicate_output_hint)
def restore(spec_path: str, barrierflow_home: str, recovery: dict[str, Any], choice: dict[str, Any]
            ) -> dict[str, Any]:
    """Restore the chosen checkpoint (`barrierflow restore`, reconciling the sinks); returns the
    restore report (`attempt`: the new attempt). A DuplicateOutputError, a running job or a
    damaged checkpoint fails the task at once with the library's message."""
    report = runbook.restore_checkpoint(spec_path, int(choice["checkpoint_id"]),
                                        accept_duplicates=runbook.validate_recovery_params(recovery).accept_duplicates)
    log.info("restore report: %s", json.dumps(report))
    return report


def skip_unless_restart(context: Any) -> None:
    """`pre_execute` hook of the recovery's `restart` task (as `@task.run_if` does it): skip the
    task, and with it the wait for a new checkpoint, unless the run's param `restart` is true."""
    from airflow.sdk.exceptions import AirflowSkipException

    if not runbook.validate_recovery_params(context["params"]).restart:
        raise AirflowSkipException("param restart is false: the pipeline was restored but is not restarted; "
                                   "trigger its launch DAG to resume it")


@task_body()
def first_checkpoint(spec_path: str, barrierflow_home: str, attempt: int) -> int | None:
    """The body of :class:`FirstCheckpointSensor`'s poke: the first completed checkpoint of
    ``attempt`` (or later), None if there is none yet."""
    return runbook.first_checkpoint_of_attempt(spec_path, attempt)


class FirstCheckpointSensor(BaseSensorOperator):
    """Succeeds once the checkpoint store holds a completed checkpoint of the attempt the
    restore started (`restore_report["attempt"]`); pushes its id (XCom `return_value`).

    Deferrable: it looks once when it runs, and while there is none it defers to
    :class:`~barrierflow.airflow.supervision.FirstCheckpointTrigger` in the triggerer (looking every
    ``poke_interval``), holding no worker slot. The timeout is the run's param `wait_seconds`, read
    when the sensor runs (the `timeout` given at parse time is only the default); past it the
    task fails (AirflowSensorTimeout) naming the attempt."""

    template_fields = ("restore_report",)

    def __init__(self, *, spec_path: str, barrierflow_home: str, restore_report: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home
        self.restore_report = restore_report

    def execute(self, context: Any) -> Any:
        from datetime import timedelta

        from barrierflow.airflow.supervision import FirstCheckpointTrigger

        self.timeout = float(runbook.validate_recovery_params(context["params"]).wait_seconds)
        poked = self.poke(context)
        if isinstance(poked, PokeReturnValue):
            return poked.xcom_value
        attempt = int(self.restore_report["attempt"])
        self.log.info("deferring: the triggerer looks every %g s for the first checkpoint of attempt %d, for at most "
                      "%g s", self.poke_interval, attempt, self.timeout)
        self.defer(trigger=FirstCheckpointTrigger(spec_path=self.spec_path, barrierflow_home=self.barrierflow_home,
                                                  attempt=attempt, poll_seconds=float(self.poke_interval)),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> int:
        """The trigger found the checkpoint: its id (XCom `return_value`)."""
        found = int((event or {})["checkpoint_id"])
        self.log.info("checkpoint %d is the first completed checkpoint of attempt %d", found,
                      int(self.restore_report["attempt"]))
        return found

    def poke(self, context: Any) -> PokeReturnValue | bool:
        attempt = int(self.restore_report["attempt"])
        found = first_checkpoint(self.spec_path, self.barrierflow_home, attempt)
        if found is None:
            self.log.info("no completed checkpoint of attempt %d yet", attempt)
            return False
        self.log.info("checkpoint %d is the first completed checkpoint of attempt %d", found, attempt)
        return PokeReturnValue(is_done=True, xcom_value=found)


@task(task_id="report", trigger_rule=TriggerRule.NONE_FAILED)
@task_body()
def report(recovery: dict[str, Any], choice: dict[str, Any], restore_report: dict[str, Any],
           first_checkpoint_id: int | None) -> dict[str, Any]:
    """Log and return the recovery summary (runs when restart and the wait were skipped too)."""
    summary = runbook.recovery_summary(choice, restore_report,
                                       restarted=runbook.validate_recovery_params(recovery).restart,
                                       first_checkpoint_id=first_checkpoint_id)
    for line in summary["message"].splitlines():
        log.info("%s", line)
    return summary


def recovery_tasks(spec_path: str, barrierflow_home: str, *, launch_dag_id: str, recover_dag_id: str,
                   poke_seconds: float) -> None:
    """The tasks of the recovery DAG ``recover_dag_id``, in order (call it inside the DAG): the
    restart triggers ``launch_dag_id``; the sensor looks every ``poke_seconds`` for the first
    checkpoint of the new attempt."""
    checked = check_params_and_job(spec_path, barrierflow_home, launch_dag_id)
    chosen = choose_checkpoint(spec_path, barrierflow_home, checked)
    restored = restore(spec_path, barrierflow_home, checked, chosen)
    restart = TriggerDagRunOperator(
        task_id="restart",
        trigger_dag_id=launch_dag_id,
        wait_for_completion=False,  # the job runs until stopped
        fail_when_dag_is_paused=True,
        note=f"restarted by {recover_dag_id} after a restore",
        # Lets the launch guard tell this restart from a stray one (restart_guard.py).
        conf={"recovery_run_id": "{{ run_id }}",
              "restored_attempt": "{{ ti.xcom_pull(task_ids='restore')['attempt'] }}"},
        pre_execute=skip_unless_restart,
    )
    waited = FirstCheckpointSensor(
        task_id="wait_for_first_checkpoint",
        spec_path=spec_path,
        barrierflow_home=barrierflow_home,
        restore_report=restored,
        # Deferred to the triggerer (no worker slot held). Not reschedule mode: with a short
        # interval it races Airflow's scheduler (a reschedule's "success" event can arrive after
        # the task was queued again, and the scheduler then fails it as "changed externally").
        poke_interval=poke_seconds,
        timeout=float(runbook.DEFAULT_PARAMS["wait_seconds"]),  # replaced by the param when it runs
    )
    restored >> restart >> waited
    report(checked, chosen, restored, waited.output)
