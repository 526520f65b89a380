"""barrierflow pipelines: seven DAGs per pipeline spec in `include/pipelines/*.yaml`, three more
(the batch side) per committed Parquet lake: a single-stage pipeline's Parquet sink, or each
final stage with a Parquet sink of a pipeline of several. One builder makes them from two
declarative tables, `DAG_KINDS` and `BATCH_DAG_KINDS` (id part, description, schedule, params,
tags, tasks, whether it applies).

* `barrierflow_pipeline__<name>` (triggered, no schedule): `launch` runs the long-running
  streaming job with `spark-submit jobs/run_pipeline.py --spec <spec>` on the `spark_default`
  connection, with the spec's `spark.conf`. When the job ends cleanly, `supervise` checks it
  left a recent completed checkpoint (3 checkpoint intervals plus a minute for the task to be
  scheduled). `max_active_runs=1`: a pipeline never runs twice.
* `barrierflow_supervise__<name>` (every 5 minutes): `supervise` fails with a clear message when
  the pipeline has no completed checkpoint or its latest one is older than the param
  `max_checkpoint_age_seconds` (default: 3 checkpoint intervals), i.e. the job is dead, stuck,
  or cannot write its checkpoints.
* `barrierflow_verify__<name>` (on the asset `barrierflow/<name>/checkpoints`, i.e. on every
  completed checkpoint, and every `verification.interval`, default 10 minutes): `verify`
  runs `barrierflow verify <spec> --latest N --json` (plus `--deep` when the spec's
  `verification.deep` is true) and returns the JSON summary (XCom `return_value`). N is the
  spec's `verification.latest`, default `checkpoint.retained`; params `latest` and `deep`
  override both for a manual run. A checkpoint that fails a check fails the task, not
  retried, with a message naming the checkpoint and the check. Results are stored beside
  each checkpoint, where `restore --latest-valid` and retention use them.
* `barrierflow_retain__<name>` (every 15 minutes): `retain` runs `barrierflow retain <spec>
  --json`: keeps the newest `checkpoint.retained` completed checkpoints (verified ones
  preferred) and every savepoint, deletes the rest and unreferenced shared files, and
  returns the JSON summary (bytes freed).
* `barrierflow_recover__<name>` (triggered, no schedule): failure recovery, one task per step,
  logic in `barrierflow.airflow.runbook`. Params (checked by their JSON schema when triggered,
  and again by the first task): `checkpoint` ("latest-valid" (default), "latest", or a
  checkpoint id), `accept_duplicates` (default false), `restart` (default true), `wait_seconds`
  (default 600).
  `check_params_and_job` fails at once, not retried, on a bad param (naming it, its value and
  what is allowed) or while the job runs (its lease is held; the message says how to stop it)
  -> `choose_checkpoint` resolves the param; "latest" or an id is verified structurally first
  and a failed check fails the task naming it; logs the chosen and the skipped checkpoints
  -> `restore` restores it (`barrierflow restore`): new attempt, the sinks' in-doubt
  transactions committed or aborted, a suppressed replay planned when newer epochs were
  already committed; returns the report -> `restart` triggers `barrierflow_pipeline__<name>`
  (skipped when `restart` is false) -> `wait_for_first_checkpoint` (sensor, poke mode,
  every 30 s, timeout `wait_seconds`) waits for a completed checkpoint of the new attempt ->
  `report` logs and returns the summary (also when the restart was skipped).
* `barrierflow_reconcile__<name>` (every 30 minutes): `reconcile` runs `barrierflow reconcile
  <spec> --json`: commits the in-doubt sink transactions the latest completed checkpoint
  covers; aborts the others when the job is not running, leaves them alone while it runs;
  returns (and logs) the decisions.
* `barrierflow_skew__<name>` (hourly): `skew` runs `barrierflow skew <spec> --json`: event time
  per source partition at each completed checkpoint's barrier, skew (newest - oldest partition),
  lag (completion - event time), idle partitions (no new records over the last
  `reports.idle_checkpoints` checkpoints) and partitions whose event time is unknown; checked
  with Great Expectations against `reports.max_skew` / `reports.max_lag`. Stores the report as
  `reports/skew-latest.json` in the checkpoint store and returns it (XCom). A failed expectation
  fails the task, not retried, naming the checkpoint and the value.

* `barrierflow_rollup__<name>` (on the asset `barrierflow/<name>/output`, and daily at 00:30 UTC):
  `rollup` spark-submits `jobs/batch_job.py rollup` (daily rollups of the committed output, Parquet
  partitioned by day; param `day`, default: the days with new output) -> `rollup_report` returns
  the report that run stored (XCom).
* `barrierflow_recompute__<name>` (daily, 02:00 UTC): `recompute` spark-submits `jobs/batch_job.py
  recompute` (the output of a closed event-time range recomputed from the source with Spark batch
  and compared with what the stream committed; params `start`, `end`) -> `compare` fails, naming
  every differing key and window, unless they are equal; returns the report (XCom).
* `barrierflow_quality__<name>` (on the output asset, and daily at 01:30 UTC): `validate` runs the
  Great Expectations suites of the committed output (newest `epochs` epochs) and the rollups,
  stores the report and offline Data Docs with the reports, returns the summary (XCom), and fails
  naming each failed expectation, its column and a sample of bad rows.
* `barrierflow_chaos__<name>` (triggered, no schedule; every spec): `chaos` runs `barrierflow
  chaos` on scratch copies of the pipeline (a staging copy: new name, work dir, storage, outputs;
  the running pipeline is not touched) with the params `kills`, `seed`, `mode`, `min_gap`,
  `max_gap`, `point_share`, `processes`; logs the summary (kills by kind, restarts, checkpoints,
  rows, missing, extra, duplicated), stores `reports/chaos-latest.html` and `.json` in the
  pipeline's checkpoint store (linked from the Checkpoints page), returns the JSON (XCom), and
  fails, not retried, on any missing, extra or duplicated row, naming the counts.

The assets are updated by watchers in Airflow's triggerer (`barrierflow.airflow.assets`): the
streaming job is not an Airflow task and knows nothing of Airflow.

A spec that fails to load does not break the other pipelines: it gets a
`barrierflow_pipeline__<file name>` DAG tagged `invalid-spec`, whose description shows the
error and whose only task, `invalid_spec`, fails with it. This is chosen over logging and
skipping the file because a skipped pipeline silently vanishes from the UI, while a failing
DAG shows what is wrong where operators look.

A multi-stage spec (`stages` and `channels`, e.g. `include/pipelines/stages.yaml`) gets the
seven streaming DAGs above, on its *global* checkpoints (each task calls the one operation that
`barrierflow <command> SPEC` calls, which opens the pipeline and works on its cuts, for either shape):

* `launch` spark-submits `jobs/run_pipeline.py --spec` as for one stage: one Spark application
  runs the pipeline coordinator and every stage's query (`barrierflow run SPEC`); it holds the
  pipeline's one lease (`<work_dir>/job.lease`), which the launch guard and the recovery check.
  `until_exhausted` defaults to true when every source stage's source is bounded. A start after
  an earlier run restores the latest global checkpoint as a new attempt. Channels on the
  embedded broker live only as long as the job: fine for one demo run, but a later launch and
  a restore refuse them (exit 2, naming the fix); give the channels a lasting broker.
* `supervise` checks the age of the newest completed global checkpoint.
* `verify`, `retain`, `reconcile`, `skew` run the same operations on the global checkpoints; their XComs are the JSON
  documents of `barrierflow verify|retain|reconcile|skew SPEC --json`. A failed verification
  names the global checkpoint, the stage and the check; a failed skew expectation the stage.
* `recover` follows the same runbook: the lease is the pipeline's, `choose_checkpoint` resolves
  latest-valid / latest / an id over the global checkpoints, each verified as one cut (every
  stage's checks and the cut over the channels), `restore` restores every stage to it (new
  attempt; `accept_duplicates` is refused: only complete global checkpoints are restored), and
  the sensor waits for the first completed global checkpoint of the new attempt.
* The checkpoints asset is updated on every completed global checkpoint.
* The batch side works per *final stage with a Parquet sink* (a stage that writes no channel):
  each gets the three batch DAGs above, with the stage in the id,
  `barrierflow_rollup__<name>__<stage>`, `barrierflow_recompute__<name>__<stage>`,
  `barrierflow_quality__<name>__<stage>` (one DAG per stage rather than one looping over the
  stages: each has its own asset, params, runs and failures), and its own output asset
  `barrierflow/<name>/<stage>/output` (URI: the stage's sink folder; watched on the COMMITTED
  epochs of the stage's 2PC ledger). Each task passes `--stage <stage>` (`barrierflow rollup|
  recompute|quality SPEC --stage NAME` does the same by hand): the stage's derived single-stage
  spec (`barrierflow.pipeline.stage_options`) names its sink, ledger and store
  (`<checkpoint.storage>/stages/<stage>`), where its reports, rollup report and Data Docs are
  stored; its `batch` section is the stage's own (`stages[].batch`, default rollups
  `rollups/<stage>` beside the sink's folder). The recomputation replays, in Spark batch, every
  stage the final stage depends on, from the source stages' records, each stage's
  transformation on the previous stage's batch result instead of the channel
  (`barrierflow.batch.stage_replay`). A final stage downstream of a cycle, or of a stage whose
  output mode is not append, gets no recompute DAG (what went through the channel depends on the
  stream's timing; `barrierflow recompute` refuses it, exit 2, naming why); its rollup and
  quality DAGs are there.

A multi-stage spec that does not load gets the failing DAG above like any other.

Parsing reads only the spec files (folder: `$BARRIERFLOW_PIPELINES_DIR`, default
`include/pipelines`): no database, no connection, no Spark. The library is imported inside
the tasks.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import (
    DAG,
    Asset,
    AssetOrTimeSchedule,
    BaseSensorOperator,
    CronTriggerTimetable,
    DeltaTriggerTimetable,
    Param,
    PokeReturnValue,
    TriggerRule,
    task,
)
from barrierflow.airflow.assets import pipeline_asset, storage_asset_uri
from barrierflow.airflow.launch import BatchSubmitOperator, PipelineSubmitOperator
from barrierflow.airflow.runbook import DEFAULT_PARAMS as RECOVER_DEFAULTS
from barrierflow.airflow.support import (
    DiscoveredPipeline,
    bounded_sources,
    dag_id_for,
    discover_pipelines,
    verification_schedule,
)
from barrierflow.pipeline.final_stages import parquet_final_stages, replay_obstacle
from barrierflow.spec.models import ParquetSinkSpec, PipelineSpec
from barrierflow.spec.stages import StagedPipelineSpec

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PIPELINES_DIR = Path(os.environ.get("BARRIERFLOW_PIPELINES_DIR") or PROJECT_ROOT / "include" / "pipelines")
JOB = PROJECT_ROOT / "jobs" / "run_pipeline.py"
BATCH_JOB = PROJECT_ROOT / "jobs" / "batch_job.py"
#: Where relative paths in specs resolve, identically for the job and the checks.
BARRIERFLOW_HOME = os.environ.get("BARRIERFLOW_HOME") or str(PROJECT_ROOT)

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_ARGS = {"owner": "barrierflow", "retries": 1, "retry_delay": timedelta(minutes=1)}
TAGS = ["barrierflow", "pipeline"]
SUPERVISE_SCHEDULE = timedelta(minutes=5)
RETAIN_SCHEDULE = timedelta(minutes=15)
RECONCILE_SCHEDULE = timedelta(minutes=30)
SKEW_SCHEDULE = timedelta(hours=1)
#: Daily runs (UTC) of the batch side, besides the output asset: rollups, then data quality (which
#: validates the rollups too), then the stream-vs-batch reconciliation.
ROLLUP_CRON = "30 0 * * *"
QUALITY_CRON = "30 1 * * *"
RECOMPUTE_CRON = "0 2 * * *"
#: How often the asset watchers look at the checkpoint store (`BARRIERFLOW_ASSET_POLL_SECONDS`, default 10).
ASSET_POLL_SECONDS = float(os.environ.get("BARRIERFLOW_ASSET_POLL_SECONDS") or 10)
#: How often the recovery's sensor looks for the first checkpoint of the restarted job
#: (`BARRIERFLOW_RECOVERY_POKE_SECONDS`, default 30).
FIRST_CHECKPOINT_POKE_SECONDS = float(os.environ.get("BARRIERFLOW_RECOVERY_POKE_SECONDS") or 30)
#: The Airflow connection of the Spark master; without it the launch uses the spec's `spark.master`.
SPARK_CONN_ID = os.environ.get("BARRIERFLOW_SPARK_CONN_ID") or "spark_default"

log = logging.getLogger(__name__)


@task(task_id="supervise")
def supervise(spec_path: str, barrierflow_home: str) -> str:
    """Fail unless the pipeline's latest completed checkpoint is younger than the param."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.support import CheckpointStaleError, check_checkpoint_freshness

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    max_age = float(get_current_context()["params"]["max_checkpoint_age_seconds"])
    try:
        return check_checkpoint_freshness(spec_path, max_age)
    except CheckpointStaleError as exc:
        # Not retried: the next scheduled check looks again.
        raise AirflowFailException(str(exc)) from exc


@task(task_id="verify")
def verify(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Verify the newest `latest` checkpoints (params); fail, naming each failed check, unless all pass.

    Returns the JSON summary of `barrierflow verify --json` (pushed to XCom); it is logged too,
    also when the task fails.
    """
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.support import CheckpointVerificationError, verify_latest_checkpoints

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    params = get_current_context()["params"]
    try:
        summary = verify_latest_checkpoints(spec_path, int(params["latest"]), deep=bool(params["deep"]))
    except CheckpointVerificationError as exc:
        log.error("verification summary: %s", json.dumps(exc.summary))
        # Not retried: a failed check fails again; the next scheduled run verifies anew.
        raise AirflowFailException(str(exc)) from exc
    log.info("verification summary: %s", json.dumps(summary))
    return summary


@task(task_id="retain")
def retain(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Run retention once; returns (and logs) the JSON summary of `barrierflow retain --json`."""
    from barrierflow.airflow.support import retain_checkpoints

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    summary = retain_checkpoints(spec_path)
    log.info("retention summary: %s", json.dumps(summary))
    return summary


@task(task_id="reconcile")
def reconcile(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """Reconcile the sinks' in-doubt transactions once; returns (and logs) the JSON document of
    `barrierflow reconcile SPEC --json`, with one log line per decision."""
    from barrierflow.airflow.support import reconcile_transactions

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    summary = reconcile_transactions(spec_path)
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
def skew(spec_path: str, barrierflow_home: str) -> dict[str, Any]:
    """The watermark-skew report over the completed checkpoints; returns (and logs) the JSON document
    of `barrierflow skew SPEC --json`. Fails at once (no retry: the next hourly run looks again),
    naming each checkpoint and value, when an expectation (`reports.max_skew` / `max_lag`) fails."""
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.support import report_watermark_skew
    from barrierflow.reports.skew import SkewExpectationError

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    try:
        summary = report_watermark_skew(spec_path)
    except SkewExpectationError as exc:
        log.error("skew report: %s", json.dumps(exc.summary))
        raise AirflowFailException(str(exc)) from exc
    log.info("skew report: %s", json.dumps(summary))
    return summary


@task(task_id="chaos", retries=0)
def chaos_task(spec_path: str, barrierflow_home: str, **context: Any) -> dict[str, Any]:
    """`barrierflow chaos` on scratch copies of the pipeline (the running pipeline is not touched)
    with the run's params; logs the summary, returns the JSON document (XCom), stores the report
    where the Checkpoints page links to it. Fails at once, not retried, on a bad param, a spec
    chaos cannot judge, or any missing, extra or duplicated row."""
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.chaos import ChaosFailedError, chaos_params, run_chaos_check
    from barrierflow.errors import UserInputError

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    try:
        return run_chaos_check(spec_path, chaos_params(context["params"]))
    except (ChaosFailedError, UserInputError) as exc:
        raise AirflowFailException(str(exc)) from exc


@task(task_id="rollup_report", retries=0)
def rollup_report(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """The report the rollup job of this run stored (``reports/rollups-latest.json``, in the final
    stage's store for ``stage``; XCom)."""
    return _own_report(spec_path, barrierflow_home, "rollups", stage)


@task(task_id="compare", retries=0)
def compare(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """Fail, naming every differing key and window, unless the stream's committed output equals the
    batch recomputation of this run (``reports/reconciliation-latest.json``); returns its summary."""
    from airflow.sdk.exceptions import AirflowFailException

    summary = _own_report(spec_path, barrierflow_home, "reconciliation", stage)
    if not summary["passed"]:
        # Not retried: the same output gives the same differences.
        raise AirflowFailException(summary["message"])
    return summary


def _own_report(spec_path: str, barrierflow_home: str, name: str, stage: str | None) -> dict[str, Any]:
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.support import BatchReportError, batch_report

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    try:
        summary = batch_report(spec_path, name, tag=str(get_current_context()["run_id"]), stage=stage)
    except BatchReportError as exc:
        raise AirflowFailException(str(exc)) from exc
    log.info("%s report: %s", name, json.dumps(summary))
    return summary


@task(task_id="validate", retries=0)
def validate(spec_path: str, barrierflow_home: str, stage: str | None = None) -> dict[str, Any]:
    """Great Expectations on the newest committed epochs and the latest rollups (of the final
    stage ``stage`` for a pipeline of several); Data Docs stored with the reports. Returns (and
    logs) the summary; fails, naming each expectation, column and a sample of bad rows, when one
    fails (not retried: the next run looks again)."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.support import QualityExpectationError, check_output_quality

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    epochs = get_current_context()["params"].get("epochs")
    try:
        summary = check_output_quality(spec_path, epochs=int(epochs) if epochs else None, stage=stage)
    except QualityExpectationError as exc:
        log.error("data-quality report: %s", json.dumps(exc.report.as_dict(), default=str))
        raise AirflowFailException(str(exc)) from exc
    log.info("data-quality report: %s", json.dumps(summary, default=str))
    return summary


@contextmanager
def _fail_on_bad_input() -> Iterator[None]:
    """Turn a UserInputError (bad param, running job, checkpoint that does not verify, duplicate
    output) into AirflowFailException: a retry cannot fix the input, so the task fails at once."""
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.errors import UserInputError

    try:
        yield
    except UserInputError as exc:
        raise AirflowFailException(str(exc)) from exc


@task(task_id="check_params_and_job", retries=0)
def check_params_and_job(spec_path: str, barrierflow_home: str, launch_dag_id: str) -> dict[str, Any]:
    """Validate the run's params and check the job is stopped; returns the validated params.

    Fails at once (AirflowFailException, no retry) on a bad param, naming it, its value and what
    is allowed, and while the job holds its lease, saying how to stop it."""
    from airflow.sdk import get_current_context
    from barrierflow.airflow.runbook import ensure_job_stopped, validate_recovery_params
    from barrierflow.recovery.restart_guard import mark_recovery

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    context = get_current_context()
    with _fail_on_bad_input():
        params = validate_recovery_params(context["params"])
        log.info("%s", ensure_job_stopped(spec_path, launch_dag_id=launch_dag_id))
    # Names this run to a launch that the guard refuses while it is active (restart_guard.py).
    marker = mark_recovery(spec_path, context["dag"].dag_id, context["run_id"])
    log.info("recovery %s owns the restart of the job until it ends", marker.describe())
    log.info("recovery params: %s", json.dumps(params.as_dict()))
    return params.as_dict()


@task(task_id="choose_checkpoint")
def choose_checkpoint(spec_path: str, barrierflow_home: str, recovery: dict[str, Any]) -> dict[str, Any]:
    """Resolve the param `checkpoint` (`recovery`: the params `check_params_and_job` validated,
    from XCom; not named `params`, which Airflow reserves for the context) to a checkpoint id; returns
    `{"requested", "checkpoint_id", "skipped": [{"checkpoint_id", "reason"}], "verification"}`.

    Fails at once, naming the checkpoint and each failed check, when "latest" or the id does
    not pass structural verification, and when no checkpoint exists or passes."""
    from barrierflow.airflow.runbook import choose_checkpoint as choose
    from barrierflow.airflow.runbook import validate_recovery_params

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    with _fail_on_bad_input():
        choice = choose(spec_path, validate_recovery_params(recovery).checkpoint)
    for skipped, why in choice.skipped:
        log.warning("skipped checkpoint %d: %s", skipped, why)
    log.info("chose checkpoint %d (checkpoint=%r): %s", choice.checkpoint_id, choice.requested, choice.verification)
    return choice.as_dict()


@task(task_id="restore")
def restore(spec_path: str, barrierflow_home: str, recovery: dict[str, Any], choice: dict[str, Any]
            ) -> dict[str, Any]:
    """Restore the chosen checkpoint (`barrierflow restore`, reconciling the sinks); returns the
    restore report (`attempt`: the new attempt). A DuplicateOutputError, a running job or a
    damaged checkpoint fails the task at once with the library's message."""
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow.runbook import duplicate_output_hint, restore_checkpoint, validate_recovery_params
    from barrierflow.recovery.restore import DuplicateOutputError

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    with _fail_on_bad_input():
        try:
            report = restore_checkpoint(spec_path, int(choice["checkpoint_id"]),
                                        accept_duplicates=validate_recovery_params(recovery).accept_duplicates)
        except DuplicateOutputError as exc:
            raise AirflowFailException(f"{exc}. {duplicate_output_hint(spec_path)}") from exc
    log.info("restore report: %s", json.dumps(report))
    return report


def skip_unless_restart(context: Any) -> None:
    """`pre_execute` hook of the recovery's `restart` task (as `@task.run_if` does it): skip the
    task, and with it the wait for a new checkpoint, unless the run's param `restart` is true."""
    from airflow.sdk.exceptions import AirflowSkipException
    from barrierflow.airflow.runbook import validate_recovery_params

    if not validate_recovery_params(context["params"]).restart:
        raise AirflowSkipException("param restart is false: the pipeline was restored but is not restarted; "
                                   "trigger its launch DAG to resume it")


class FirstCheckpointSensor(BaseSensorOperator):
    """Succeeds once the checkpoint store holds a completed checkpoint of the attempt the
    restore started (`restore_report["attempt"]`); pushes its id (XCom `return_value`).

    The timeout is the run's param `wait_seconds`, read when the sensor runs (the `timeout`
    given at parse time is only the default)."""

    template_fields = ("restore_report",)

    def __init__(self, *, spec_path: str, barrierflow_home: str, restore_report: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.barrierflow_home = barrierflow_home
        self.restore_report = restore_report

    def execute(self, context: Any) -> Any:
        from barrierflow.airflow.runbook import validate_recovery_params

        self.timeout = float(validate_recovery_params(context["params"]).wait_seconds)
        return super().execute(context)

    def poke(self, context: Any) -> PokeReturnValue | bool:
        from barrierflow.airflow.runbook import first_checkpoint_of_attempt

        os.environ.setdefault("BARRIERFLOW_HOME", self.barrierflow_home)
        attempt = int(self.restore_report["attempt"])
        found = first_checkpoint_of_attempt(self.spec_path, attempt)
        if found is None:
            self.log.info("no completed checkpoint of attempt %d yet", attempt)
            return False
        self.log.info("checkpoint %d is the first completed checkpoint of attempt %d", found, attempt)
        return PokeReturnValue(is_done=True, xcom_value=found)


@task(task_id="report", trigger_rule=TriggerRule.NONE_FAILED)
def report(recovery: dict[str, Any], choice: dict[str, Any], restore_report: dict[str, Any],
           first_checkpoint_id: int | None) -> dict[str, Any]:
    """Log and return the recovery summary (runs when restart and the wait were skipped too)."""
    from barrierflow.airflow.runbook import recovery_summary, validate_recovery_params

    summary = recovery_summary(choice, restore_report, restarted=validate_recovery_params(recovery).restart,
                               first_checkpoint_id=first_checkpoint_id)
    for line in summary["message"].splitlines():
        log.info("%s", line)
    return summary


def _dag(dag_id: str, description: str, *, schedule: Any, params: dict[str, Param] | None = None,
         doc_md: str = __doc__ or "", extra_tags: tuple[str, ...] = ()) -> DAG:
    """A DAG with the settings every barrierflow DAG shares: the module docstring as doc, UTC
    start date, no catchup, one run at a time, retries, the barrierflow tags."""
    return DAG(
        dag_id=dag_id,
        description=description,
        doc_md=doc_md,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        params=params or {},
        tags=[*TAGS, *extra_tags],
    )


#: The launch DAG checks the checkpoint age after the job ended: allow this much for the check
#: task to be scheduled once the job has stopped.
AFTER_JOB_SCHEDULING_SLACK_SECONDS = 60.0


def _max_age_param(checkpoint_interval: float, slack: float = 0.0) -> Param:
    return Param(
        max(1.0, 3 * checkpoint_interval) + slack,
        type="number",
        minimum=1,
        description="Fail when the latest completed checkpoint is older than this many seconds.",
    )


def _verify_params(latest: int, deep: bool) -> dict[str, Param]:
    return {
        "latest": Param(latest, type="integer", minimum=1,
                        description="Verify this many of the newest checkpoints."),
        "deep": Param(deep, type="boolean",
                      description="Also restore each checkpoint, read its state with Spark and run the "
                                  "expectation suite."),
    }


def _recover_params() -> dict[str, Param]:
    return {
        "checkpoint": Param(
            RECOVER_DEFAULTS["checkpoint"], type=["string", "integer"], pattern=r"^(latest-valid|latest|[1-9][0-9]*)$",
            minimum=1,
            description='"latest-valid": the newest checkpoint that passes structural verification (newer ones are '
                        'skipped and listed); "latest": the newest checkpoint, verified first; or a checkpoint id.'),
        "accept_duplicates": Param(
            RECOVER_DEFAULTS["accept_duplicates"], type="boolean",
            description="Restore even if output already committed after the checkpoint would be written again, "
                        "instead of failing when it cannot be replayed with the output suppressed."),
        "restart": Param(RECOVER_DEFAULTS["restart"], type="boolean",
                         description="Trigger the pipeline's launch DAG after the restore."),
        "wait_seconds": Param(
            RECOVER_DEFAULTS["wait_seconds"], type="integer", minimum=1,
            description="After the restart, wait this many seconds for the first new completed checkpoint."),
    }


def _launch_params(entry: DiscoveredPipeline) -> dict[str, Param]:
    assert entry.spec is not None
    bounded = bounded_sources(entry.spec)
    return {
        "max_checkpoint_age_seconds": _max_age_param(entry.spec.checkpoint.interval,
                                                     AFTER_JOB_SCHEDULING_SLACK_SECONDS),
        "until_exhausted": Param(
            bounded, type="boolean",
            description="Stop the job once a bounded source is exhausted and everything is committed "
                        "(default: true exactly when the spec's source is bounded; with stages, every "
                        "source stage's)."),
    }


def _chaos_params(p: Pipeline) -> dict[str, Param]:
    staged = isinstance(p.spec, StagedPipelineSpec)
    return {
        "kills": Param(20, type="integer", minimum=1, description="How many times the copy under test is killed."),
        "seed": Param(0, type="integer", description="Random seed: the same seed makes the same choices."),
        "mode": Param("mixed" if staged else "group", type="string", enum=["group", "jvm", "stage", "mixed"],
                      description="What a kill hits: the process group, the driver's JVM, one stage process "
                                  "(with processes), or any of them."),
        "min_gap": Param(5.0, type="number", exclusiveMinimum=0, description="Shortest run before a kill (s)."),
        "max_gap": Param(30.0, type="number", exclusiveMinimum=0, description="Longest run before a kill (s)."),
        "point_share": Param(0.25, type="number", minimum=0, maximum=1,
                             description="Share of the kills made at a protocol point of barrierflow.faults."),
        "processes": Param(False, type="boolean", description="Several stages: one process per stage."),
        "scratch": Param("", type="string", description="Where the copies, logs and report go (empty: beside the "
                                                         "pipeline's work dir)."),
    }


def _day_param() -> dict[str, Param]:
    return {"day": Param("", type="string", pattern=r"^(|[0-9]{4}-[0-9]{2}-[0-9]{2})$",
                         description="Roll up this UTC day (YYYY-MM-DD). Empty: every day with output committed "
                                     "since the last rollup (all days at the first run).")}


def _range_params() -> dict[str, Param]:
    iso = r"^(|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9]{2}:[0-9]{2}))$"
    return {
        "start": Param("", type="string", pattern=iso,
                       description="First window start compared (ISO time with timezone). Empty: the source's first "
                                   "record."),
        "end": Param("", type="string", pattern=iso,
                     description="Compare the windows ending before this (ISO time with timezone). Empty: the "
                                 "watermark of the newest checkpoint whose output is committed."),
    }


def _epochs_param(default: int) -> dict[str, Param]:
    return {"epochs": Param(default, type="integer", minimum=1,
                            description="Validate the output of this many of the newest committed epochs.")}


@dataclass(frozen=True)
class Output:
    """A committed Parquet lake of a pipeline and its asset: the sink of a single-stage pipeline
    (``stage`` None), or that of a final stage of several. Its batch DAGs work on it."""

    stage: str | None
    asset: Asset
    #: Whether its output can be recomputed in batch (not downstream of a cycle or of a stage whose
    #: output mode is not append: `barrierflow.pipeline.final_stages.replay_obstacle`).
    recomputable: bool = True

    def dag_id(self, pipeline: Pipeline, kind: str) -> str:
        """``barrierflow_<kind>__<pipeline>``, with ``__<stage>`` for a final stage."""
        return pipeline.dag_id(kind) + (f"__{self.stage}" if self.stage else "")

    def submit_args(self) -> list[str]:
        return ["--stage", self.stage] if self.stage else []


@dataclass(frozen=True)
class Pipeline:
    """What the DAGs of one pipeline are built from."""

    entry: DiscoveredPipeline
    spec_path: str
    checkpoints: Asset
    outputs: tuple[Output, ...]  # none: no Parquet sink (single stage) or no final Parquet stage

    @property
    def spec(self) -> PipelineSpec | StagedPipelineSpec:
        assert self.entry.spec is not None
        return self.entry.spec

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def summary(self) -> str:
        return f"barrierflow pipeline {self.name!r} ({self.spec_path})"

    def dag_id(self, kind: str) -> str:
        return dag_id_for(self.name, kind)


def _storage_asset_uri(uri: str) -> str:
    if uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
        return storage_asset_uri(uri, str(path if path.is_absolute() else Path(BARRIERFLOW_HOME) / path))
    return storage_asset_uri(uri)


def _pipeline(entry: DiscoveredPipeline) -> Pipeline:
    assert entry.spec is not None
    spec_path = str(entry.path.resolve())
    watch = {"spec_path": spec_path, "barrierflow_home": BARRIERFLOW_HOME, "poll_seconds": ASSET_POLL_SECONDS}
    checkpoints = pipeline_asset(entry.name, "checkpoints", _storage_asset_uri(entry.spec.checkpoint.storage), **watch)
    spec = entry.spec
    outputs: list[Output] = []
    if isinstance(spec, PipelineSpec):
        if isinstance(spec.sink, ParquetSinkSpec):
            outputs.append(Output(None, pipeline_asset(entry.name, "output", _storage_asset_uri(spec.sink.path),
                                                       min_interval_seconds=spec.batch.output_event_interval, **watch)))
    else:
        for stage in parquet_final_stages(spec):
            sink = stage.sinks[0]
            assert isinstance(sink, ParquetSinkSpec)
            asset = pipeline_asset(entry.name, "output", _storage_asset_uri(sink.path), stage=stage.name,
                                   min_interval_seconds=stage.batch.output_event_interval, **watch)
            outputs.append(Output(stage.name, asset, recomputable=replay_obstacle(spec, stage.name) is None))
    return Pipeline(entry, spec_path, checkpoints, tuple(outputs))


# -- the DAG kinds: what each DAG of a pipeline runs ---------------------------------------------


def _launch_body(p: Pipeline) -> None:
    launch = PipelineSubmitOperator(
        task_id="launch",
        application=str(JOB),
        conn_id=SPARK_CONN_ID,
        name=f"barrierflow-{p.name}",
        application_args=["--spec", p.spec_path],
        conf=dict(p.spec.spark.conf) or None,
        env_vars=_job_env(),
        spec_path=p.spec_path,
        spec_master=p.spec.spark.master,
        recovery_dag_id=p.dag_id("recover"),
    )
    launch >> supervise(p.spec_path, BARRIERFLOW_HOME)


def _recovery_body(p: Pipeline) -> None:
    checked = check_params_and_job(p.spec_path, BARRIERFLOW_HOME, p.dag_id("pipeline"))
    chosen = choose_checkpoint(p.spec_path, BARRIERFLOW_HOME, checked)
    restored = restore(p.spec_path, BARRIERFLOW_HOME, checked, chosen)
    restart = TriggerDagRunOperator(
        task_id="restart",
        trigger_dag_id=p.dag_id("pipeline"),
        wait_for_completion=False,  # the job runs until stopped
        fail_when_dag_is_paused=True,
        note=f"restarted by {p.dag_id('recover')} after a restore",
        # Lets the launch guard tell this restart from a stray one (restart_guard.py).
        conf={"recovery_run_id": "{{ run_id }}",
              "restored_attempt": "{{ ti.xcom_pull(task_ids='restore')['attempt'] }}"},
        pre_execute=skip_unless_restart,
    )
    waited = FirstCheckpointSensor(
        task_id="wait_for_first_checkpoint",
        spec_path=p.spec_path,
        barrierflow_home=BARRIERFLOW_HOME,
        restore_report=restored,
        # Poke mode holds one worker slot for at most `wait_seconds`. Reschedule mode with a short
        # interval races Airflow's scheduler: a reschedule's "success" event can arrive after
        # the task was queued again, and the scheduler then fails it as "changed externally".
        mode="poke",
        poke_interval=FIRST_CHECKPOINT_POKE_SECONDS,
        timeout=float(RECOVER_DEFAULTS["wait_seconds"]),  # replaced by the param when it runs
    )
    restored >> restart >> waited
    report(checked, chosen, restored, waited.output)


def _job_env() -> dict[str, str]:
    return {"PYSPARK_PYTHON": sys.executable, "BARRIERFLOW_HOME": BARRIERFLOW_HOME}


def _batch_submit(p: Pipeline, o: Output, task_id: str, job_args: list[str]) -> BatchSubmitOperator:
    """spark-submit ``jobs/batch_job.py`` with ``job_args`` (templated) on the pipeline's master,
    for output ``o`` (``--stage`` for a final stage)."""
    return BatchSubmitOperator(
        task_id=task_id,
        application=str(BATCH_JOB),
        conn_id=SPARK_CONN_ID,
        name=f"barrierflow-{task_id}-{p.name}" + (f"-{o.stage}" if o.stage else ""),
        application_args=[*job_args, "--spec", p.spec_path, *o.submit_args(), "--tag", "{{ run_id }}"],
        conf=dict(p.spec.spark.conf) or None,
        env_vars=_job_env(),
        spec_master=p.spec.spark.master,
        retries=0,  # a failed job fails the same way again; the next scheduled run tries anew
    )


def _rollup_body(p: Pipeline, o: Output) -> None:
    job = _batch_submit(p, o, "rollup", ["rollup", "--day", "{{ params.day }}"])
    job >> rollup_report(p.spec_path, BARRIERFLOW_HOME, o.stage)


def _recompute_body(p: Pipeline, o: Output) -> None:
    job = _batch_submit(p, o, "recompute", ["recompute", "--start", "{{ params.start }}", "--end", "{{ params.end }}"])
    job >> compare(p.spec_path, BARRIERFLOW_HOME, o.stage)


def _or_daily(cron: str, o: Output) -> AssetOrTimeSchedule:
    return AssetOrTimeSchedule(timetable=CronTriggerTimetable(cron, timezone="UTC"), assets=o.asset)


def _output_summary(p: Pipeline, o: Output) -> str:
    return f"the committed output of {p.summary}" + (f", final stage {o.stage!r}" if o.stage else "")


@dataclass(frozen=True)
class DagKind:
    """One kind of DAG made per pipeline: its id part, description, schedule, params, extra tags,
    tasks (``body``, called inside the DAG) and whether the pipeline gets it (``applies``)."""

    kind: str
    description: Callable[[Pipeline], str]
    schedule: Callable[[Pipeline], Any]
    body: Callable[[Pipeline], None]
    params: Callable[[Pipeline], dict[str, Param]] = lambda p: {}
    tags: tuple[str, ...] = ()
    applies: Callable[[Pipeline], bool] = lambda p: True


DAG_KINDS: tuple[DagKind, ...] = (
    DagKind("pipeline", lambda p: f"Run {p.summary}", lambda p: None, _launch_body,
            params=lambda p: _launch_params(p.entry)),
    DagKind("supervise", lambda p: f"Check the latest completed checkpoint of {p.summary}",
            lambda p: SUPERVISE_SCHEDULE, lambda p: supervise(p.spec_path, BARRIERFLOW_HOME),
            params=lambda p: {"max_checkpoint_age_seconds": _max_age_param(p.spec.checkpoint.interval)}),
    DagKind("verify",
            lambda p: (f"Verify the newest {verification_schedule(p.spec).latest} checkpoints"
                       f"{' (deep)' if verification_schedule(p.spec).deep else ''} of {p.summary}, on every "
                       "completed checkpoint (asset) and on schedule"),
            lambda p: AssetOrTimeSchedule(
                timetable=DeltaTriggerTimetable(timedelta(seconds=verification_schedule(p.spec).interval_seconds)),
                assets=p.checkpoints),
            lambda p: verify(p.spec_path, BARRIERFLOW_HOME),
            params=lambda p: _verify_params(verification_schedule(p.spec).latest, verification_schedule(p.spec).deep)),
    DagKind("retain",
            lambda p: (f"Keep the newest {p.spec.checkpoint.retained} checkpoints and savepoints, delete the rest, "
                       f"of {p.summary}"),
            lambda p: RETAIN_SCHEDULE, lambda p: retain(p.spec_path, BARRIERFLOW_HOME)),
    DagKind("recover",
            lambda p: (f"Recover {p.summary}: check the job is stopped, choose and verify a checkpoint, restore it "
                       "(reconciling the sinks), restart, wait for the first new checkpoint, report"),
            lambda p: None, _recovery_body, params=lambda p: _recover_params(), tags=("recovery",)),
    DagKind("reconcile",
            lambda p: f"Finish the in-doubt sink transactions of {p.summary} against its latest completed checkpoint",
            lambda p: RECONCILE_SCHEDULE, lambda p: reconcile(p.spec_path, BARRIERFLOW_HOME)),
    DagKind("skew", lambda p: f"Watermark-skew report (event time, skew, lag, idle partitions; expectations) of "
                              f"{p.summary}",
            lambda p: SKEW_SCHEDULE, lambda p: skew(p.spec_path, BARRIERFLOW_HOME), tags=("data-quality",)),
    DagKind("chaos", lambda p: (f"Prove exactly-once on {p.summary} under random kills: a failure-free run and a run "
                                "under kills in scratch copies, outputs compared row by row (barrierflow chaos)"),
            lambda p: None, lambda p: chaos_task(p.spec_path, BARRIERFLOW_HOME), params=_chaos_params,
            tags=("chaos",)),
)


@dataclass(frozen=True)
class BatchDagKind:
    """One kind of batch DAG, made per committed Parquet lake (:class:`Output`) of a pipeline:
    a single-stage pipeline's sink, or each final stage with a Parquet sink of several."""

    kind: str
    description: Callable[[Pipeline, Output], str]
    schedule: Callable[[Pipeline, Output], Any]
    body: Callable[[Pipeline, Output], None]
    params: Callable[[Pipeline], dict[str, Param]]
    tags: tuple[str, ...]
    applies: Callable[[Output], bool] = lambda o: True


BATCH_DAG_KINDS: tuple[BatchDagKind, ...] = (
    BatchDagKind("rollup", lambda p, o: f"Daily rollups (Spark batch) of {_output_summary(p, o)}, on new output "
                                        "(asset) and daily",
                 lambda p, o: _or_daily(ROLLUP_CRON, o), _rollup_body, lambda p: _day_param(), ("batch",)),
    BatchDagKind("recompute", lambda p, o: (f"Stream-vs-batch reconciliation of {_output_summary(p, o)}: recompute "
                                            "the output of a closed event-time range from the source (Spark batch"
                                            f"{', replaying every stage it depends on' if o.stage else ''}) and "
                                            "compare it with what the stream committed"),
                 lambda p, o: CronTriggerTimetable(RECOMPUTE_CRON, timezone="UTC"), _recompute_body,
                 lambda p: _range_params(), ("batch", "data-quality"), applies=lambda o: o.recomputable),
    BatchDagKind("quality", lambda p, o: (f"Data quality (Great Expectations, Data Docs) of {_output_summary(p, o)} "
                                          "and its rollups, on new output (asset) and daily"),
                 lambda p, o: _or_daily(QUALITY_CRON, o), lambda p, o: validate(p.spec_path, BARRIERFLOW_HOME, o.stage),
                 lambda p: _epochs_param(p.spec.verification.quality_epochs if p.spec.verification else 3),
                 ("data-quality",)),
)


def _pipeline_dags(entry: DiscoveredPipeline) -> list[DAG]:
    """One DAG per kind in :data:`DAG_KINDS` that applies to the pipeline, and one per kind in
    :data:`BATCH_DAG_KINDS` (that applies) and committed Parquet lake of the pipeline."""
    pipeline = _pipeline(entry)
    dags = []
    for kind in DAG_KINDS:
        if not kind.applies(pipeline):
            continue
        with _dag(pipeline.dag_id(kind.kind), kind.description(pipeline), schedule=kind.schedule(pipeline),
                  params=kind.params(pipeline), extra_tags=kind.tags) as built:
            kind.body(pipeline)
        dags.append(built)
    for output in pipeline.outputs:
        for batch_kind in BATCH_DAG_KINDS:
            if not batch_kind.applies(output):
                continue
            with _dag(output.dag_id(pipeline, batch_kind.kind), batch_kind.description(pipeline, output),
                      schedule=batch_kind.schedule(pipeline, output), params=batch_kind.params(pipeline),
                      extra_tags=batch_kind.tags) as built:
                batch_kind.body(pipeline, output)
            dags.append(built)
    return dags


def _invalid_spec_dag(entry: DiscoveredPipeline) -> DAG:
    error = entry.error or "unknown error"

    @task(task_id="invalid_spec", retries=0)
    def invalid_spec() -> None:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(error)

    with _dag(dag_id_for(entry.name, "pipeline"), f"INVALID SPEC {entry.path}: {error.splitlines()[-1].strip()}"[:1000],
              schedule=None, doc_md=f"{__doc__}\n## This spec does not load\n\n```\n{error}\n```\n",
              extra_tags=("invalid-spec",)) as invalid:
        invalid_spec()
    return invalid


for _entry in discover_pipelines(PIPELINES_DIR):
    for _dag_object in _pipeline_dags(_entry) if _entry.spec is not None else [_invalid_spec_dag(_entry)]:
        globals()[_dag_object.dag_id] = _dag_object
