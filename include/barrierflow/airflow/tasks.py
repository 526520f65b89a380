"""The TaskFlow tasks of the scheduled and batch DAGs, and of a spec that does not load.

Each is a thin task body around one function of a module of :mod:`barrierflow.airflow` named after
its concept (:mod:`.freshness`, :mod:`.verification`, :mod:`.retention`, ...) (which call
:mod:`barrierflow.ops`), wrapped in :func:`.task_body.task_body` (``BARRIERFLOW_HOME`` from the
argument ``barrierflow_home``; the errors a retry cannot fix fail the task at once, naming the
thing and the fix). ``dags/barrierflow_pipelines.py`` calls them inside its DAGs:

* ``supervise`` (launch and supervision DAGs): the latest completed checkpoint is younger than
  the param ``max_checkpoint_age_seconds``;
* ``verify``, ``retain``, ``reconcile``, ``skew``: ``barrierflow verify|retain|reconcile|skew SPEC
  --json`` once; their XCom is the JSON document, also logged;
* ``chaos``: ``barrierflow chaos`` on scratch copies with the run's params;
* ``stop``: ``barrierflow stop SPEC [--savepoint] --json`` with the run's params ``savepoint``
  and ``timeout_seconds``;
* ``rollup_report`` and ``compare`` (after the batch job's spark-submit) and ``validate``: the
  batch side of a committed Parquet lake (``stage``: a final stage of a pipeline of several);
* :func:`invalid_spec`: the one task of the DAG that shows a spec's load error.

The recovery DAG's tasks are in :mod:`.recovery_tasks`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow.sdk import task

from barrierflow.airflow import (
    batch_reports,
    chaos,
    freshness,
    quality,
    reconciliation,
    retention,
    stopping,
    verification,
    watermark_skew,
)
from barrierflow.airflow.chaos import ChaosFailedError
from barrierflow.airflow.errors import BatchReportError, CheckpointStaleError, CheckpointVerificationError
from barrierflow.airflow.task_body import task_body
from barrierflow.errors import UserInputError
from barrierflow.reports.quality import QualityExpectationError
from barrierflow.reports.skew import SkewExpectationError

log = logging.getLogger(__name__)

# The operations are looked up in their modules when a task runs (``verification.verify_latest_checkpoints``),
# not bound here: a test may replace one there, as it could when the DAG file imported them in its tasks.


def current_context() -> Any:
    """Airflow's context of the running task (looked up when called, so a test may replace
    ``airflow.sdk.get_current_context``)."""
    import airflow.sdk

    return airflow.sdk.get_current_context()


@task(task_id="supervise")
@task_body(CheckpointStaleError)  # not retried: the next scheduled check looks again
def supervise(spec_path: str, barrierflow_home: str) -> str:
    """Fail unless the pipeline's latest completed checkpoint is younger than the param."""
    max_age = float(current_context()["params"]["max_checkpoint_age_seconds"])
    return freshness.check_checkpoint_freshness(spec_path, max_age)


@task(task_id="verify")
# Not retried: a failed check fails again; the next scheduled run verifies anew.
@task_body(CheckpointVerificationError, report_as="verification summary")
def verify(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Verify the newest `latest` checkpoints (params); fail, naming each failed check, unless all pass.

    Returns the JSON summary of `barrierflow verify --json` (pushed to XCom); it is logged too,
    also when the task fails.
    """
    params = current_context()["params"]
    summary = verification.verify_latest_checkpoints(spec_path, int(params["latest"]), deep=bool(params["deep"]))
    log.info("verification summary: %s", json.dumps(summary))
    return summary


@task(task_id="retain")
@task_body()
def retain(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Run retention once; returns (and logs) the JSON summary of `barrierflow retain --json`."""
    summary = retention.retain_checkpoints(spec_path)
    log.info("retention summary: %s", json.dumps(summary))
    return summary


@task(task_id="stop", retries=0)
@task_body(UserInputError)  # nothing to stop: not retried
def stop(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Stop the running pipeline (params ``savepoint``, ``timeout_seconds``); returns (and logs)
    the JSON document of `barrierflow stop --json`: the savepoint's id and location. Fails at
    once when nothing runs; fails when the stop did not complete (its message says whether the
    pipeline keeps running)."""
    params = current_context()["params"]
    summary = stopping.stop_pipeline(spec_path, savepoint=bool(params["savepoint"]),
                                     timeout_seconds=float(params["timeout_seconds"]))
    log.info("%s", summary["message"])
    log.info("stop summary: %s", json.dumps(summary))
    return summary


@task(task_id="reconcile")
@task_body()
def reconcile(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Reconcile the sinks' in-doubt transactions once; returns (and logs) the JSON document of
    `barrierflow reconcile SPEC --json`, with one log line per decision."""
    summary = reconciliation.reconcile_transactions(spec_path)
    running = "running" if summary["job_running"] else "not running"
    log.info("pipeline %r: latest completed checkpoint %s; job %s", summary["pipeline"], summary["latest_completed"],
             running)
    for stage, decisions in summary["stages"].items():  # one stage: the pipeline's own
        for d in decisions:
            log.info("stage %s: %s %s %s (epoch %s, %s): %s", stage, d["action"], d["sink"], d["transaction_id"],
                     d["checkpoint_id"], d["state"], d["reason"])
    if not summary["decisions"]:
        log.info("nothing in doubt")
    log.info("reconciliation summary: %s", json.dumps(summary))
    return summary


@task(task_id="skew", retries=0)
@task_body(SkewExpectationError, report_as="skew report")
def skew(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """The watermark-skew report over the completed checkpoints; returns (and logs) the JSON document
    of `barrierflow skew SPEC --json`. Fails at once (no retry: the next hourly run looks again),
    naming each checkpoint and value, when an expectation (`reports.max_skew` / `max_lag`) fails."""
    summary = watermark_skew.report_watermark_skew(spec_path)
    log.info("skew report: %s", json.dumps(summary))
    return summary


@task(task_id="chaos", retries=0)
@task_body(ChaosFailedError, UserInputError)
def chaos_task(spec_path: str, barrierflow_home: str, **context: Any) -> dict[str, Any]:
    """`barrierflow chaos` on scratch copies of the pipeline (the running pipeline is not touched)
    with the run's params; logs the summary, returns the JSON document (XCom), stores the report
    where the Checkpoints page links to it. Fails at once, not retried, on a bad param, a spec
    chaos cannot judge, or any missing, extra or duplicated row."""
    return chaos.run_chaos_check(spec_path, chaos.chaos_params(context["params"]))


@task(task_id="rollup_report", retries=0)
@task_body(BatchReportError)
def rollup_report(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """The report the rollup job of this run stored (``reports/rollups-latest.json``, in the final
    stage's store for ``stage``; XCom)."""
    return _own_report(spec_path, "rollups", stage)


@task(task_id="compare", retries=0)
@task_body(BatchReportError)
def compare(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """Fail, naming every differing key and window, unless the stream's committed output equals the
    batch recomputation of this run (the stream-vs-batch comparison's report,
    ``reports/recompute-latest.json``); returns its summary. A comparison that could not apply
    (no event time, an output mode other than append, a range Kafka no longer retains) is
    skipped, its one line naming why: not compared, never passed."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    summary = _own_report(spec_path, "recompute", stage)
    if summary.get("compared") is False:
        raise AirflowSkipException(summary["message"])
    if not summary["passed"]:
        # Not retried: the same output gives the same differences.
        raise AirflowFailException(summary["message"])
    return summary


def _own_report(spec_path: str, name: str, stage: str | None) -> dict[str, Any]:
    """The ``name`` report the batch job of this DAG run stored (logged); BatchReportError if none."""
    summary = batch_reports.batch_report(spec_path, name, tag=str(current_context()["run_id"]), stage=stage)
    log.info("%s report: %s", name, json.dumps(summary))
    return summary


@task(task_id="validate", retries=0)
@task_body(QualityExpectationError, report_as="data-quality report")
def validate(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """Great Expectations on the newest committed epochs and the latest rollups (of the final
    stage ``stage`` for a pipeline of several); Data Docs stored with the reports. Returns (and
    logs) the summary; fails, naming each expectation, column and a sample of bad rows, when one
    fails (not retried: the next run looks again)."""
    epochs = current_context()["params"].get("epochs")
    summary = quality.check_output_quality(spec_path, epochs=int(epochs) if epochs else None, stage=stage)
    log.info("data-quality report: %s", json.dumps(summary, default=str))
    return summary


def invalid_spec(error: str) -> Any:
    """The task ``invalid_spec`` of a spec that does not load: it fails, not retried, with the
    load error ``error`` (called inside the DAG; returns the task's output)."""

    @task(task_id="invalid_spec", retries=0)
    def invalid_spec() -> None:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(error)

    return invalid_spec()
