"""The Airflow side of the alerts: :class:`BarrierflowNotifier`, an Airflow notifier that turns a
failed task into an alert and dispatches it to the destinations of the pipeline's spec.

Design: the alert is raised by a task-level ``on_failure_callback``, not a DAG-level one. Airflow 3
runs a task's callbacks in the worker right after the task failed for good (not after a failure
that is retried), with the error in the context, so the alert can name the error's own message
and the task; a DAG-level callback runs in the DAG processor, without the error. The DAG file
(``dags/barrierflow_pipelines.py``) puts one notifier into the ``default_args`` of every DAG of a
pipeline whose spec has an ``alerts`` block, so every task gets it (the launch operator as the
TaskFlow tasks and the recovery's sensor) without any of them knowing of alerts.

The kind of the alert is read from the error that failed the task (the error itself, or what an
``AirflowFailException`` was raised from):

* :class:`~barrierflow.airflow.errors.CheckpointStaleError` (the supervision check):
  ``checkpoint_age``, details ``age_seconds`` (null: no completed checkpoint) and ``max_age_seconds``;
* :class:`~barrierflow.airflow.errors.CheckpointVerificationError` (the verify DAG):
  ``verification``, details ``failures`` (checkpoint id, check, message of each failed check);
* anything else: ``task_failure``, details ``error`` (the error's type).

The notifier is a ``BaseNotifier``, so it can be added to a DAG of one's own too::

    from barrierflow.airflow.notifier import BarrierflowNotifier

    @task(on_failure_callback=BarrierflowNotifier("pipelines/demo.yaml"))
    def my_check(): ...

It reads the spec when it fires (the pipeline's name and ``alerts`` block; ``barrierflow_home``
as the tasks' own: relative paths resolve there). Whatever goes wrong in it (a spec that no
longer loads, a destination that is down) is logged in the task's log and never raised: the
task has failed already, and its state stays the failure's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseNotifier

from barrierflow.airflow.errors import CheckpointStaleError, CheckpointVerificationError
from barrierflow.alerts import Alert, AlertKind, Delivery, dispatch

log = logging.getLogger(__name__)

__all__ = ["BarrierflowNotifier", "alert_for_failed_task"]


def _error_chain(error: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _kind_and_details(error: BaseException | None) -> tuple[AlertKind, BaseException | None, dict[str, Any]]:
    """The alert kind for the task's error, the error that decided it, and the kind's details."""
    for link in _error_chain(error):
        if isinstance(link, CheckpointStaleError):
            return AlertKind.CHECKPOINT_AGE, link, {"age_seconds": link.age_seconds,
                                                    "max_age_seconds": link.max_age_seconds}
        if isinstance(link, CheckpointVerificationError):
            return AlertKind.VERIFICATION, link, {"failures": [
                {"checkpoint_id": cid, "check": check, "message": message} for cid, check, message in link.failures]}
    return AlertKind.TASK_FAILURE, error, {"error": type(error).__name__ if error is not None else None}


def alert_for_failed_task(pipeline: str, context: Mapping[str, Any], *, runbook: str = "docs/operations.md",
                          now: datetime | None = None) -> Alert:
    """The alert for the failed task of Airflow ``context`` (an ``on_failure_callback``'s),
    about ``pipeline``; see the module docstring for its kind."""
    ti = context.get("ti") or context.get("task_instance")
    dag_id = getattr(ti, "dag_id", None)
    task_id = getattr(ti, "task_id", None)
    run_id = getattr(ti, "run_id", None) or context.get("run_id")
    try_number = getattr(ti, "try_number", None)
    error = context.get("exception")
    kind, cause, details = _kind_and_details(error if isinstance(error, BaseException) else None)
    reason = str(cause) if cause is not None else (str(error) if error else "no error was recorded")
    message = f"task {task_id} of DAG {dag_id} (run {run_id}) failed: {reason}"
    return Alert.of(pipeline, kind, message, runbook=runbook, at=now or datetime.now(UTC), dag_id=dag_id,
                    run_id=run_id, task_id=task_id, try_number=try_number if isinstance(try_number, int) else None,
                    details=details)


class BarrierflowNotifier(BaseNotifier):
    """Dispatch an alert for a failed task to the destinations of the spec's ``alerts`` block.

    Args:
        spec_path: the pipeline's spec file (templated).
        barrierflow_home: where the spec's relative paths resolve, set as ``BARRIERFLOW_HOME``
            unless the environment sets it (as :func:`barrierflow.airflow.task_body.task_body` does).
    """

    template_fields = ("spec_path",)

    def __init__(self, spec_path: str, barrierflow_home: str | None = None) -> None:
        super().__init__()
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home

    def notify(self, context: Any) -> None:
        """Build and dispatch the alert; log, never raise, whatever fails."""
        self.deliveries: list[Delivery] = []
        try:
            if self.barrierflow_home:
                os.environ.setdefault("BARRIERFLOW_HOME", self.barrierflow_home)
            from barrierflow.spec.loader import load_any_spec

            spec = load_any_spec(self.spec_path)
            if spec.alerts is None:
                log.info("pipeline %s: no alerts block in %s; no alert sent", spec.name, self.spec_path)
                return
            alert = alert_for_failed_task(spec.name, context, runbook=spec.alerts.runbook)
            self.deliveries = dispatch(alert, spec.alerts)
        except Exception as exc:  # the task failed already: the alert must not add a second failure
            log.warning("no alert sent for the failed task (spec %s): %s: %s", self.spec_path, type(exc).__name__,
                        str(exc).splitlines()[0] if str(exc) else "")
