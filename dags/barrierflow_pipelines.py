"""barrierflow pipelines: four DAGs per pipeline spec in `include/pipelines/*.yaml`.

* `barrierflow_pipeline__<name>` (triggered, no schedule): `launch` runs the long-running
  streaming job with `spark-submit jobs/run_pipeline.py --spec <spec>` on the `spark_default`
  connection, with the spec's `spark.conf`. When the job ends cleanly, `supervise` checks it
  left a recent completed checkpoint. `max_active_runs=1`: a pipeline never runs twice.
* `barrierflow_supervise__<name>` (every 5 minutes): `supervise` fails with a clear message when
  the pipeline has no completed checkpoint or its latest one is older than the param
  `max_checkpoint_age_seconds` (default: 3 checkpoint intervals), i.e. the job is dead, stuck,
  or cannot write its checkpoints.
* `barrierflow_verify__<name>` (every `verification.interval`, default 10 minutes): `verify`
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

A spec that fails to load does not break the other pipelines: it gets a
`barrierflow_pipeline__<file name>` DAG tagged `invalid-spec`, whose description shows the
error and whose only task, `invalid_spec`, fails with it. This is chosen over logging and
skipping the file because a skipped pipeline silently vanishes from the UI, while a failing
DAG shows what is wrong where operators look.

Parsing reads only the spec files (folder: `$BARRIERFLOW_PIPELINES_DIR`, default
`include/pipelines`): no database, no connection, no Spark. The library is imported inside
the tasks.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, dag, task
from barrierflow.airflow_support import DiscoveredPipeline, dag_id_for, discover_pipelines, verification_schedule

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PIPELINES_DIR = Path(os.environ.get("BARRIERFLOW_PIPELINES_DIR") or PROJECT_ROOT / "include" / "pipelines")
JOB = PROJECT_ROOT / "jobs" / "run_pipeline.py"
#: Where relative paths in specs resolve, identically for the job and the checks.
BARRIERFLOW_HOME = os.environ.get("BARRIERFLOW_HOME") or str(PROJECT_ROOT)

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_ARGS = {"owner": "barrierflow", "retries": 1, "retry_delay": timedelta(minutes=1)}
TAGS = ["barrierflow", "pipeline"]
SUPERVISE_SCHEDULE = timedelta(minutes=5)
RETAIN_SCHEDULE = timedelta(minutes=15)

log = logging.getLogger(__name__)


@task(task_id="supervise")
def supervise(spec_path: str, barrierflow_home: str) -> str:
    """Fail unless the pipeline's latest completed checkpoint is younger than the param."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.airflow_support import CheckpointStaleError, check_checkpoint_freshness

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
    from barrierflow.airflow_support import CheckpointVerificationError, verify_latest_checkpoints

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
    from barrierflow.airflow_support import retain_checkpoints

    os.environ.setdefault("BARRIERFLOW_HOME", barrierflow_home)
    summary = retain_checkpoints(spec_path)
    log.info("retention summary: %s", json.dumps(summary))
    return summary


def _barrierflow_dag(
    dag_id: str,
    description: str,
    *,
    schedule: timedelta | None,
    params: dict[str, Param] | None = None,
    doc_md: str = __doc__ or "",
    extra_tags: tuple[str, ...] = (),
) -> Callable[[Callable[[], None]], Callable[[], DAG]]:
    """The `@dag` decorator with the settings every barrierflow DAG shares: the module docstring
    as doc, UTC start date, no catchup, one run at a time, retries, the barrierflow tags."""
    return dag(
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


def _max_age_param(checkpoint_interval: float) -> Param:
    return Param(
        max(1.0, 3 * checkpoint_interval),
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


def _pipeline_dags(entry: DiscoveredPipeline) -> list[DAG]:
    assert entry.spec is not None
    spec_path = str(entry.path.resolve())
    params = {"max_checkpoint_age_seconds": _max_age_param(entry.spec.checkpoint.interval)}
    verification = verification_schedule(entry.spec)
    summary = f"barrierflow pipeline {entry.name!r} ({spec_path})"

    @_barrierflow_dag(dag_id_for(entry.name, "pipeline"), f"Run {summary}", schedule=None, params=params)
    def pipeline() -> None:
        launch = SparkSubmitOperator(
            task_id="launch",
            application=str(JOB),
            conn_id="spark_default",
            name=f"barrierflow-{entry.name}",
            application_args=["--spec", spec_path],
            conf=dict(entry.spec.spark.conf) or None,
            env_vars={"PYSPARK_PYTHON": sys.executable, "BARRIERFLOW_HOME": BARRIERFLOW_HOME},
        )
        launch >> supervise(spec_path, BARRIERFLOW_HOME)

    @_barrierflow_dag(dag_id_for(entry.name, "supervise"), f"Check the latest completed checkpoint of {summary}",
                      schedule=SUPERVISE_SCHEDULE, params=params)
    def supervision() -> None:
        supervise(spec_path, BARRIERFLOW_HOME)

    @_barrierflow_dag(
        dag_id_for(entry.name, "verify"),
        f"Verify the newest {verification.latest} checkpoints{' (deep)' if verification.deep else ''} of {summary}",
        schedule=timedelta(seconds=verification.interval_seconds),
        params=_verify_params(verification.latest, verification.deep),
    )
    def verification_dag() -> None:
        verify(spec_path, BARRIERFLOW_HOME)

    @_barrierflow_dag(
        dag_id_for(entry.name, "retain"),
        f"Keep the newest {entry.spec.checkpoint.retained} checkpoints and savepoints, delete the rest, of {summary}",
        schedule=RETAIN_SCHEDULE,
    )
    def retention() -> None:
        retain(spec_path, BARRIERFLOW_HOME)

    return [pipeline(), supervision(), verification_dag(), retention()]


def _invalid_spec_dag(entry: DiscoveredPipeline) -> DAG:
    error = entry.error or "unknown error"

    @_barrierflow_dag(
        dag_id_for(entry.name, "pipeline"),
        f"INVALID SPEC {entry.path}: {error.splitlines()[-1].strip()}"[:1000],
        schedule=None,
        doc_md=f"{__doc__}\n## This spec does not load\n\n```\n{error}\n```\n",
        extra_tags=("invalid-spec",),
    )
    def invalid() -> None:
        @task(task_id="invalid_spec", retries=0)
        def invalid_spec() -> None:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(error)

        invalid_spec()

    return invalid()


for _entry in discover_pipelines(PIPELINES_DIR):
    for _dag in _pipeline_dags(_entry) if _entry.spec is not None else [_invalid_spec_dag(_entry)]:
        globals()[_dag.dag_id] = _dag
