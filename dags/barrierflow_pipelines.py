"""barrierflow pipelines: seven DAGs per pipeline spec in `$BARRIERFLOW_PIPELINES_DIR/*.yaml`
(default `$BARRIERFLOW_HOME/pipelines`), an eighth (chaos) for a spec that opts in, one more
(table maintenance) for a spec writing Iceberg or Delta tables, three more (the batch side) per
committed lake: a single-stage pipeline's Parquet sink or table, or each final stage with a
Parquet sink or a table of a pipeline of several (a table is read as of a cut). One builder makes them from two
declarative tables, `DAG_KINDS` and `BATCH_DAG_KINDS` (id part, description, schedule, params,
tags, tasks, whether it applies).

* `barrierflow_pipeline__<name>` (triggered, no schedule): `launch` runs the long-running
  streaming job with `spark-submit jobs/run_pipeline.py --spec <spec>` on the `spark_default`
  connection, with the spec's `spark.conf`, started detached from the task (its own session,
  log and exit status in `<work_dir>/launches/`, the spec's restart strategy applied between
  attempts), then defers to a trigger that watches the launch, the lease's heartbeat and the
  checkpoints (no worker slot held; the pipeline outlives restarts of Airflow): success when the
  job ends with exit 0, failure naming the cause, the exit code, the log and the restart
  strategy's outcome, or failure as stalled when no checkpoint completed for the param
  `stall_after_seconds` (default: 10 checkpoint intervals, at least 600 s), looking every
  `BARRIERFLOW_LAUNCH_WATCH_SECONDS` (default 10). When the job ends cleanly, `supervise` checks it
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
  (skipped when `restart` is false) -> `wait_for_first_checkpoint` (sensor, deferred to
  the triggerer, looking every 30 s, timeout `wait_seconds`) waits for a completed checkpoint of the new attempt ->
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
* `barrierflow_stop__<name>` (triggered, no schedule): `stop` runs `barrierflow stop <spec>
  [--savepoint] --json`: asks the running job (the launch DAG's, wherever it runs) to stop and
  waits for it. Params: `savepoint` (default true: one more checkpoint, committed by every sink,
  kept as a savepoint), `timeout_seconds` (default 600). Returns the savepoint's id and location
  (XCom); fails at once, not retried, when nothing runs.
* `barrierflow_upgrade__<name>` (triggered, no schedule): `report` runs `barrierflow upgrade <spec>
  --to <new_spec> --dry-run --json` (compatible / needs rewrite / incompatible, per stage and
  operator; an incompatible verdict fails it, changing nothing) -> `needs_approval` (stops a dry
  run here) -> `approve` (Airflow's human-in-the-loop ApprovalOperator, the report as its body;
  rejected: nothing else runs) -> `upgrade` runs `barrierflow upgrade <spec> --to <new_spec>`.
  Params: `new_spec` (required), `dry_run` (default true), `checkpoint` (default the newest),
  `canary_checkpoints` (default 3; 0: no canary).

* `barrierflow_rollup__<name>` (on the asset `barrierflow/<name>/output`, and daily at 00:30 UTC):
  `rollup` spark-submits `jobs/batch_job.py rollup` (daily rollups of the committed output, Parquet
  partitioned by day; param `day`, default: the days with new output) -> `rollup_report` returns
  the report that run stored (XCom).
* `barrierflow_recompute__<name>` (daily, 02:00 UTC): `recompute` spark-submits `jobs/batch_job.py
  recompute` (the output of a closed event-time range recomputed from the source with Spark batch,
  a Kafka source read again over the offset ranges the checkpoint covers, and compared with what
  the stream committed; params `start`, `end`) -> `compare` fails, naming every differing key and
  window, unless they are equal, and is skipped, naming why in one line, when the comparison
  cannot apply (not compared); returns the report (XCom).
* `barrierflow_quality__<name>` (on the output asset, and daily at 01:30 UTC): `validate` runs the
  Great Expectations suites of the committed output (newest `epochs` epochs) and the rollups,
  stores the report and offline Data Docs with the reports, returns the summary (XCom), and fails
  naming each failed expectation, its column and a sample of bad rows.
* `barrierflow_tables__<name>` (on the asset `barrierflow/<name>/tables`; only for a spec that writes
  Iceberg or Delta tables): `table_cut` returns (XCom) and logs the cut of the triggering asset
  event, every table's version as of one checkpoint (in a run no event triggered: the newest cut);
  a downstream task reads each table at the version it names (docs/lakehouse.md).
* `barrierflow_maintain__<name>` (daily, 03:00 UTC; only for a spec writing an Iceberg or Delta
  table): `maintain` runs `barrierflow lake maintain <spec> --json` (Iceberg: small files of a
  partition compacted, snapshots expired; Delta: OPTIMIZE, VACUUM; every version the restore rule
  and the retained cut records need kept; params `older_than_hours`, `retention_hours`).
* `barrierflow_chaos__<name>` (triggered, no schedule; only for a spec with `chaos: {dag: true}`,
  whose PostgreSQL / Kafka sinks then need scratch servers, `chaos.postgres_dsn_env` /
  `chaos.kafka_bootstrap_servers`, or the spec does not load): `chaos` runs `barrierflow
  chaos` on scratch copies of the pipeline (a scratch copy: new name, work dir, storage, outputs;
  the running pipeline is not touched) with the params `kills`, `seed`, `mode`, `min_gap`,
  `max_gap`, `point_share`, `processes`; logs the summary (kills by kind, restarts, checkpoints,
  rows, missing, extra, duplicated), stores `reports/chaos-latest.html` and `.json` in the
  pipeline's checkpoint store (linked from the Checkpoints page), returns the JSON (XCom), and
  fails, not retried, on any missing, extra or duplicated row, naming the counts.

A spec with an `alerts` block gets `barrierflow.airflow.notifier.BarrierflowNotifier` as the
`on_failure_callback` of every task of its DAGs (through `default_args`): a task that fails for
good sends a `task_failure`, `checkpoint_age` (supervise) or `verification` (verify) alert to the
spec's destinations (docs/operations.md, "Alerts").

The assets are updated by watchers in Airflow's triggerer (`barrierflow.airflow.assets`): the
streaming job is not an Airflow task and knows nothing of Airflow.

A spec that fails to load does not break the other pipelines: it gets a
`barrierflow_pipeline__<file name>` DAG tagged `invalid-spec`, whose description shows the
error and whose only task, `invalid_spec`, fails with it. This is chosen over logging and
skipping the file because a skipped pipeline silently vanishes from the UI, while a failing
DAG shows what is wrong where operators look.

A multi-stage spec (`stages` and `channels`, e.g. `include/pipelines/stages.yaml`) gets the
streaming DAGs above (chaos when it opts in), on its *global* checkpoints (each task calls the
one operation that `barrierflow <command> SPEC` calls, which opens the pipeline and works on
its cuts, for either shape):

* `launch` spark-submits `jobs/run_pipeline.py --spec` as for one stage: one Spark application
  runs the pipeline coordinator and every stage's query (`barrierflow run SPEC`); it holds the
  pipeline's one lease (`<work_dir>/job.lease`), which the launch guard and the recovery check.
  `until_exhausted` defaults to true when every source stage's source is bounded. A start after
  an earlier run restores the latest global checkpoint as a new attempt. Channels on the
  embedded broker keep their data in the pipeline's work dir: a later launch or a restore
  starts the broker again on the same data (production channels want a lasting cluster).
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
`$BARRIERFLOW_HOME/pipelines`, the user's own; the repository's example and benchmark specs in
`include/pipelines` are served only where the variable names them: `make airflow`, the compose
stack): no database, no connection, no Spark. The library is imported inside
the tasks.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, AssetOrTimeSchedule, CronTriggerTimetable, DeltaTriggerTimetable, Param
from barrierflow.airflow import params as dag_params
from barrierflow.airflow.assets import asset_name
from barrierflow.airflow.dag_ids import dag_id_for
from barrierflow.airflow.dag_model import BatchDagKind, DagKind, Output, Pipeline, pipeline_dags_model
from barrierflow.airflow.launch import BatchSubmitOperator, PipelineSubmitOperator
from barrierflow.airflow.notifier import BarrierflowNotifier
from barrierflow.airflow.recovery_tasks import recovery_tasks
from barrierflow.airflow.tasks import (
    chaos_task,
    compare,
    invalid_spec,
    maintain_tables,
    reconcile,
    retain,
    rollup_report,
    skew,
    stop,
    supervise,
    table_cut,
    validate,
    verify,
)
from barrierflow.airflow.upgrade_tasks import upgrade_tasks
from barrierflow.airflow.verification import verification_schedule
from barrierflow.ops.discovery import DiscoveredPipeline, discover_pipelines, pipelines_folder

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOB = PROJECT_ROOT / "jobs" / "run_pipeline.py"
BATCH_JOB = PROJECT_ROOT / "jobs" / "batch_job.py"
#: Where relative paths in specs resolve, identically for the job and the checks.
BARRIERFLOW_HOME = os.environ.get("BARRIERFLOW_HOME") or str(PROJECT_ROOT)
#: `$BARRIERFLOW_PIPELINES_DIR`, default `$BARRIERFLOW_HOME/pipelines` (not the repository's examples).
PIPELINES_DIR = pipelines_folder(BARRIERFLOW_HOME)

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_ARGS = {"owner": "barrierflow", "retries": 1, "retry_delay": timedelta(minutes=1)}
TAGS = ["barrierflow", "pipeline"]
SUPERVISE_SCHEDULE = timedelta(minutes=5)
RETAIN_SCHEDULE = timedelta(minutes=15)
RECONCILE_SCHEDULE = timedelta(minutes=30)
SKEW_SCHEDULE = timedelta(hours=1)
#: Daily runs (UTC) of the batch side, besides the output asset: rollups, then data quality (which
#: validates the rollups too), then the stream-vs-batch comparison.
ROLLUP_CRON = "30 0 * * *"
QUALITY_CRON = "30 1 * * *"
RECOMPUTE_CRON = "0 2 * * *"
#: Daily table maintenance (UTC) of a pipeline writing Iceberg or Delta tables.
MAINTAIN_CRON = "0 3 * * *"
#: How often the asset watchers look at the checkpoint store (`BARRIERFLOW_ASSET_POLL_SECONDS`, default 10).
ASSET_POLL_SECONDS = float(os.environ.get("BARRIERFLOW_ASSET_POLL_SECONDS") or 10)
#: How often the recovery's sensor looks for the first checkpoint of the restarted job
#: (`BARRIERFLOW_RECOVERY_POKE_SECONDS`, default 30).
FIRST_CHECKPOINT_POKE_SECONDS = float(os.environ.get("BARRIERFLOW_RECOVERY_POKE_SECONDS") or 30)
#: How often the launch's trigger looks at the running pipeline (`BARRIERFLOW_LAUNCH_WATCH_SECONDS`, default 10).
LAUNCH_WATCH_POLL_SECONDS = float(os.environ.get("BARRIERFLOW_LAUNCH_WATCH_SECONDS") or 10)
#: The Airflow connection of the Spark master; without it the launch uses the spec's `spark.master`.
SPARK_CONN_ID = os.environ.get("BARRIERFLOW_SPARK_CONN_ID") or "spark_default"
#: The launch DAG checks the checkpoint age after the job ended: allow this much for the check
#: task to be scheduled once the job has stopped.
AFTER_JOB_SCHEDULING_SLACK_SECONDS = 60.0


def _dag(dag_id: str, description: str, *, schedule: Any, params: dict[str, Param] | None = None,
         doc_md: str = __doc__ or "", extra_tags: tuple[str, ...] = (), on_failure: Any = None) -> DAG:
    """A DAG with the settings every barrierflow DAG shares: the module docstring as doc, UTC
    start date, no catchup, one run at a time, retries, the barrierflow tags; ``on_failure``
    (the pipeline's alert notifier) becomes every task's ``on_failure_callback``."""
    return DAG(
        dag_id=dag_id,
        description=description,
        doc_md=doc_md,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "on_failure_callback": on_failure} if on_failure is not None else DEFAULT_ARGS,
        params=params or {},
        tags=[*TAGS, *extra_tags],
    )


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
        watch_poll_seconds=LAUNCH_WATCH_POLL_SECONDS,
    )
    launch >> supervise(p.spec_path, BARRIERFLOW_HOME)


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
        spec_path=p.spec_path,
        stage=o.stage,
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


DAG_KINDS: tuple[DagKind, ...] = (
    DagKind("pipeline", lambda p: f"Run {p.summary}", lambda p: None, _launch_body,
            params=lambda p: dag_params.launch_params(p.spec, AFTER_JOB_SCHEDULING_SLACK_SECONDS)),
    DagKind("supervise", lambda p: f"Check the latest completed checkpoint of {p.summary}",
            lambda p: SUPERVISE_SCHEDULE, lambda p: supervise(p.spec_path, BARRIERFLOW_HOME),
            params=lambda p: {"max_checkpoint_age_seconds": dag_params.max_age_param(p.spec.checkpoint.interval)}),
    DagKind("verify",
            lambda p: (f"Verify the newest {verification_schedule(p.spec).latest} checkpoints"
                       f"{' (deep)' if verification_schedule(p.spec).deep else ''} of {p.summary}, on every "
                       "completed checkpoint (asset) and on schedule"),
            lambda p: AssetOrTimeSchedule(
                timetable=DeltaTriggerTimetable(timedelta(seconds=verification_schedule(p.spec).interval_seconds)),
                assets=p.checkpoints),
            lambda p: verify(p.spec_path, BARRIERFLOW_HOME),
            params=lambda p: dag_params.verify_params(verification_schedule(p.spec).latest,
                                                     verification_schedule(p.spec).deep)),
    DagKind("retain",
            lambda p: (f"Keep the newest {p.spec.checkpoint.retained} checkpoints and savepoints, delete the rest, "
                       f"of {p.summary}"),
            lambda p: RETAIN_SCHEDULE, lambda p: retain(p.spec_path, BARRIERFLOW_HOME)),
    DagKind("recover",
            lambda p: (f"Recover {p.summary}: check the job is stopped, choose and verify a checkpoint, restore it "
                       "(reconciling the sinks), restart, wait for the first new checkpoint, report"),
            lambda p: None,
            lambda p: recovery_tasks(p.spec_path, BARRIERFLOW_HOME, launch_dag_id=p.dag_id("pipeline"),
                                     recover_dag_id=p.dag_id("recover"), poke_seconds=FIRST_CHECKPOINT_POKE_SECONDS),
            params=lambda p: dag_params.recover_params(), tags=("recovery",)),
    DagKind("reconcile",
            lambda p: f"Finish the in-doubt sink transactions of {p.summary} against its latest completed checkpoint",
            lambda p: RECONCILE_SCHEDULE, lambda p: reconcile(p.spec_path, BARRIERFLOW_HOME)),
    DagKind("stop", lambda p: (f"Stop {p.summary}: one more checkpoint, committed by every sink, kept as a "
                               "savepoint (param savepoint), then every stage stops"),
            lambda p: None, lambda p: stop(p.spec_path, BARRIERFLOW_HOME), params=lambda p: dag_params.stop_params()),
    DagKind("upgrade", lambda p: (f"Upgrade {p.summary} to a changed spec: the compatibility report of its saved state "
                                  "(param new_spec; dry_run stops there), a person's approval, then the upgrade"),
            lambda p: None, lambda p: upgrade_tasks(p.spec_path, BARRIERFLOW_HOME, p.name),
            params=lambda p: dag_params.upgrade_params(), tags=("upgrade",)),
    DagKind("skew", lambda p: f"Watermark-skew report (event time, skew, lag, idle partitions; expectations) of "
                              f"{p.summary}",
            lambda p: SKEW_SCHEDULE, lambda p: skew(p.spec_path, BARRIERFLOW_HOME), tags=("data-quality",)),
    DagKind("tables", lambda p: (f"The tables of each new cut of {p.summary}: every Iceberg and Delta table's version "
                                 "as of one checkpoint, from the tables asset's event (returned for downstream tasks)"),
            lambda p: p.tables, lambda p: table_cut(p.spec_path, BARRIERFLOW_HOME, asset_name(p.name, "tables")),
            tags=("lakehouse",), applies=lambda p: p.tables is not None),
    DagKind("maintain", lambda p: (f"Maintain the Iceberg and Delta tables of {p.summary}: expire Iceberg snapshots, "
                                   "OPTIMIZE and VACUUM Delta tables, keeping every version the restore rule and the "
                                   "retained cuts need"),
            lambda p: CronTriggerTimetable(MAINTAIN_CRON, timezone="UTC"),
            lambda p: maintain_tables(p.spec_path, BARRIERFLOW_HOME), params=lambda p: dag_params.maintain_params(),
            tags=("maintenance",), applies=lambda p: p.writes_tables),
    DagKind("chaos", lambda p: (f"Prove exactly-once on {p.summary} under random kills: a failure-free run and a run "
                                "under kills in scratch copies, outputs compared row by row (barrierflow chaos)"),
            lambda p: None, lambda p: chaos_task(p.spec_path, BARRIERFLOW_HOME),
            params=lambda p: dag_params.chaos_run_params(p.spec), tags=("chaos",),
            applies=lambda p: p.wants_chaos_dag),
)


BATCH_DAG_KINDS: tuple[BatchDagKind, ...] = (
    BatchDagKind("rollup", lambda p, o: f"Daily rollups (Spark batch) of {o.summary(p)}, on new output "
                                        "(asset) and daily",
                 lambda p, o: _or_daily(ROLLUP_CRON, o), _rollup_body, lambda p: dag_params.day_param(), ("batch",)),
    BatchDagKind("recompute", lambda p, o: (f"Stream-vs-batch comparison of {o.summary(p)}: recompute "
                                            "the output of a closed event-time range from the source (Spark batch"
                                            f"{', replaying every stage it depends on' if o.stage else ''}) and "
                                            "compare it with what the stream committed"),
                 lambda p, o: CronTriggerTimetable(RECOMPUTE_CRON, timezone="UTC"), _recompute_body,
                 lambda p: dag_params.range_params(), ("batch", "data-quality"), applies=lambda o: o.recomputable),
    BatchDagKind("quality", lambda p, o: (f"Data quality (Great Expectations, Data Docs) of {o.summary(p)} "
                                          "and its rollups, on new output (asset) and daily"),
                 lambda p, o: _or_daily(QUALITY_CRON, o), lambda p, o: validate(p.spec_path, BARRIERFLOW_HOME, o.stage),
                 lambda p: dag_params.epochs_param(p.spec.verification.quality_epochs if p.spec.verification else 3),
                 ("data-quality",)),
)


def _pipeline_dags(entry: DiscoveredPipeline) -> list[DAG]:
    """One DAG per kind in :data:`DAG_KINDS` that applies to the pipeline, and one per kind in
    :data:`BATCH_DAG_KINDS` (that applies) and committed Parquet lake of the pipeline."""
    pipeline = pipeline_dags_model(entry, barrierflow_home=BARRIERFLOW_HOME, poll_seconds=ASSET_POLL_SECONDS)
    # A spec with an `alerts` block: every task of its DAGs alerts when it fails for good.
    notifier = BarrierflowNotifier(pipeline.spec_path, BARRIERFLOW_HOME) if pipeline.spec.alerts else None
    dags = []
    for kind in DAG_KINDS:
        if not kind.applies(pipeline):
            continue
        with _dag(pipeline.dag_id(kind.kind), kind.description(pipeline), schedule=kind.schedule(pipeline),
                  params=kind.params(pipeline), extra_tags=kind.tags, on_failure=notifier) as built:
            kind.body(pipeline)
        dags.append(built)
    for output in pipeline.outputs:
        for batch_kind in BATCH_DAG_KINDS:
            if not batch_kind.applies(output):
                continue
            with _dag(output.dag_id(pipeline, batch_kind.kind), batch_kind.description(pipeline, output),
                      schedule=batch_kind.schedule(pipeline, output), params=batch_kind.params(pipeline),
                      extra_tags=batch_kind.tags, on_failure=notifier) as built:
                batch_kind.body(pipeline, output)
            dags.append(built)
    return dags


def _invalid_spec_dag(entry: DiscoveredPipeline) -> DAG:
    error = entry.error or "unknown error"
    with _dag(dag_id_for(entry.name, "pipeline"), f"INVALID SPEC {entry.path}: {error.splitlines()[-1].strip()}"[:1000],
              schedule=None, doc_md=f"{__doc__}\n## This spec does not load\n\n```\n{error}\n```\n",
              extra_tags=("invalid-spec",)) as invalid:
        invalid_spec(error)
    return invalid


# The specs are loaded with the same home as the tasks (their output assets' URIs), not against
# the spec files' folder, where a spec file's relative paths resolve when BARRIERFLOW_HOME is unset.
for _entry in discover_pipelines(PIPELINES_DIR, home=BARRIERFLOW_HOME):
    for _dag_object in _pipeline_dags(_entry) if _entry.spec is not None else [_invalid_spec_dag(_entry)]:
        globals()[_dag_object.dag_id] = _dag_object
