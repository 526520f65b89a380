"""The TaskFlow tasks of the scheduled and batch DAGs, and of a spec that does not load.

Each is a thin task body that calls one operation of :mod:`barrierflow.ops` (or, where the
Airflow side adds a rule of its own, a module named after it: :mod:`.freshness`,
:mod:`.verification`, :mod:`.chaos`) and returns the result's JSON document (its ``as_dict()``,
what ``--json`` of the same command prints), wrapped in :func:`.task_body.task_body`
(``BARRIERFLOW_HOME`` from the argument ``barrierflow_home``; the errors a retry cannot fix fail
the task at once, naming the thing and the fix). ``dags/barrierflow_pipelines.py`` calls them
inside its DAGs:

* ``supervise`` (launch and supervision DAGs): the latest completed checkpoint is younger than
  the param ``max_checkpoint_age_seconds``;
* ``verify``, ``retain``, ``reconcile``, ``skew``: ``barrierflow verify|retain|reconcile|skew SPEC
  --json`` once; their XCom is the JSON document, also logged;
* ``chaos``: ``barrierflow chaos`` on scratch copies with the run's params;
* ``maintain``: ``barrierflow lake maintain SPEC --json`` with the run's params (a pipeline
  writing Iceberg or Delta tables);
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

from barrierflow.airflow import chaos, freshness, verification
from barrierflow.airflow.chaos import ChaosFailedError
from barrierflow.airflow.errors import BatchReportError, CheckpointStaleError, CheckpointVerificationError
from barrierflow.airflow.task_body import task_body
from barrierflow.errors import UserInputError
from barrierflow.reports.quality import QualityExpectationError
from barrierflow.reports.skew import SkewExpectationError

log = logging.getLogger(__name__)

# The operations are imported when a task runs (``from barrierflow.ops.retain import retain`` in its body),
# not when the DAG file is parsed: parsing stays light, and a test may replace one in its module.

#: How many differences the XCom of the stream-vs-batch comparison lists (the stored report lists more).
XCOM_DIFFERENCES = 100


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
    """Run retention once (:func:`barrierflow.ops.retain.retain`: the newest ``checkpoint.retained``
    cuts and every savepoint kept, the rest deleted; safe while the job runs); returns (and logs)
    the JSON summary of `barrierflow retain --json`."""
    from barrierflow.ops.retain import retain as retain_cuts

    summary = retain_cuts(spec_path).as_dict()
    log.info("retention summary: %s", json.dumps(summary))
    return summary


@task(task_id="table_cut")
@task_body(UserInputError)  # no cut recorded yet: not retried
def table_cut(spec_path: str, barrierflow_home: str, asset: str) -> dict[str, Any]:
    """The cut of the pipeline's tables this run works on, returned (XCom) and logged: the newest
    cut among the run's triggering events of the tables asset ``asset`` (every table's version
    as of one checkpoint, :func:`barrierflow.airflow.assets.triggering_cut`), or, in a run the
    asset did not trigger, the newest cut recorded now (``barrierflow lake read``)."""
    from barrierflow.airflow.assets import triggering_cut
    from barrierflow.ops.lake import lake_cut

    cut = triggering_cut(current_context().get("triggering_asset_events"), asset)
    if cut is None:
        cut = {**lake_cut(spec_path).as_dict(), "from": "the newest cut (no asset event triggered this run)"}
    else:
        cut = {**cut, "from": f"the asset event of cut {cut['checkpoint_id']}"}
    for name, version in sorted(cut["tables"].items()):
        log.info("cut %s: %s = %s", cut["checkpoint_id"], name, json.dumps(version))
    return cut


@task(task_id="maintain")
@task_body(UserInputError)
def maintain_tables(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Maintain the pipeline's Iceberg and Delta tables once (:func:`barrierflow.ops.lake.maintain`:
    Iceberg snapshots expired, Delta OPTIMIZE and VACUUM, every version the restore rule and the
    retained cuts need kept; params ``older_than_hours``, ``retention_hours``); returns (and logs)
    the JSON document of `barrierflow lake maintain --json`."""
    from barrierflow.ops.lake import maintain

    params = current_context()["params"]
    done = maintain(spec_path, older_than_hours=float(params["older_than_hours"]),
                    retention_hours=int(params["retention_hours"]))
    for line in done.lines():
        log.info("%s", line)
    return done.as_dict()


@task(task_id="stop", retries=0)
@task_body(UserInputError)  # nothing to stop: not retried
def stop(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Stop the running pipeline (params ``savepoint``, ``timeout_seconds``); returns (and logs)
    the JSON document of `barrierflow stop --json`: the savepoint's id and location. Fails at
    once when nothing runs; fails when the stop did not complete (its message says whether the
    pipeline keeps running)."""
    from barrierflow.ops.stop import stop as stop_pipeline

    params = current_context()["params"]
    summary = stop_pipeline(spec_path, savepoint=bool(params["savepoint"]),
                            timeout=float(params["timeout_seconds"])).as_dict()
    log.info("%s", summary["message"])
    log.info("stop summary: %s", json.dumps(summary))
    return summary


@task(task_id="reconcile")
@task_body()
def reconcile(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Reconcile the sinks' in-doubt transactions once; returns (and logs) the JSON document of
    `barrierflow reconcile SPEC --json`, with one log line per decision
    (:func:`barrierflow.ops.reconcile.reconcile`: COMMIT what the latest completed cut covers,
    ABORT the rest when the job is not running, leave it while it runs)."""
    from barrierflow.ops.reconcile import reconcile as reconcile_transactions

    summary = reconcile_transactions(spec_path).as_dict()
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
    naming each checkpoint and value, when an expectation (`reports.max_skew` / `max_lag`) fails.
    The report is stored as ``reports/skew-latest.json`` (:func:`barrierflow.ops.skew.skew`)."""
    from barrierflow.ops.skew import skew as watermark_skew

    outcome = watermark_skew(spec_path)
    outcome.raise_for_failures(spec_path)
    for name, report in outcome.stages.items():
        log.info("pipeline %r, stage %s: %s", outcome.pipeline, name, report.message)
    summary = outcome.as_dict()
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
    summary = batch_report(spec_path, name, tag=str(current_context()["run_id"]), stage=stage)
    log.info("%s report: %s", name, json.dumps(summary))
    return summary


def batch_report(spec_path: str, name: str, *, tag: str, stage: str | None = None) -> dict[str, Any]:
    """The stored ``rollups`` or ``recompute`` report written by the batch job run with ``--tag
    tag`` (the DAG run's id), its differences cut to :data:`XCOM_DIFFERENCES` for XCom. ``stage``:
    for a pipeline of several stages, the final stage (its report is in the stage's own store).
    A report only under its legacy key (``reports/reconciliation-latest.json``, see
    :func:`barrierflow.ops.batch.stored_report`) is read too; it was written before the rename,
    so it is another run's and its run is named.

    Raises:
        BatchReportError: no report, or one of another run (naming the run and where it is).
    """
    from barrierflow.ops.batch import REPORT_KEYS, stored_report

    found = stored_report(spec_path, name, stage)
    if found is None or found.document.get("tag") != tag:
        store = f"the checkpoint store of stage {stage!r}" if stage else "the checkpoint store"
        where = (f"no report is at {REPORT_KEYS[name]}" if found is None
                 else f"the report of run {found.document.get('tag')!r} is at {found.key}")
        raise BatchReportError(
            f"pipeline {spec_path}: the batch job of run {tag!r} left no {name} report ({where} in {store}): "
            "see the spark-submit task's log for why the job failed")
    document = found.document
    if len(document.get("differences") or []) > XCOM_DIFFERENCES:
        document["differences"] = document["differences"][:XCOM_DIFFERENCES]
    return document


@task(task_id="validate", retries=0)
@task_body(QualityExpectationError, report_as="data-quality report")
def validate(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """Great Expectations on the newest committed epochs and the latest rollups (of the final
    stage ``stage`` for a pipeline of several); Data Docs stored with the reports. Returns (and
    logs) the summary; fails, naming each expectation, column and a sample of bad rows, when one
    fails (not retried: the next run looks again)."""
    from barrierflow.ops.quality import quality
    from barrierflow.reports.quality import raise_for_failures

    epochs = current_context()["params"].get("epochs")
    report = quality(spec_path, epochs=int(epochs) if epochs else None, stage=stage)
    raise_for_failures(report, spec_path)
    summary = report.as_dict()
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
