"""barrierflow pipelines: one pair of DAGs per pipeline spec in `include/pipelines/*.yaml`.

* `barrierflow_pipeline__<name>` (triggered, no schedule): `launch` runs the long-running
  streaming job with `spark-submit jobs/run_pipeline.py --spec <spec>` on the `spark_default`
  connection, with the spec's `spark.conf`. When the job ends cleanly, `supervise` checks it
  left a recent completed checkpoint. `max_active_runs=1`: a pipeline never runs twice.
* `barrierflow_supervise__<name>` (every 5 minutes): `supervise` fails with a clear message when
  the pipeline has no completed checkpoint or its latest one is older than the param
  `max_checkpoint_age_seconds` (default: 3 checkpoint intervals), i.e. the job is dead, stuck,
  or cannot write its checkpoints.

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

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, dag, task
from barrierflow.airflow_support import DiscoveredPipeline, dag_id_for, discover_pipelines

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PIPELINES_DIR = Path(os.environ.get("BARRIERFLOW_PIPELINES_DIR") or PROJECT_ROOT / "include" / "pipelines")
JOB = PROJECT_ROOT / "jobs" / "run_pipeline.py"
#: Where relative paths in specs resolve, identically for the job and the checks.
BARRIERFLOW_HOME = os.environ.get("BARRIERFLOW_HOME") or str(PROJECT_ROOT)

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_ARGS = {"owner": "barrierflow", "retries": 1, "retry_delay": timedelta(minutes=1)}
TAGS = ["barrierflow", "pipeline"]


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


def _max_age_param(checkpoint_interval: float) -> Param:
    return Param(
        max(1.0, 3 * checkpoint_interval),
        type="number",
        minimum=1,
        description="Fail when the latest completed checkpoint is older than this many seconds.",
    )


def _pipeline_dags(entry: DiscoveredPipeline) -> list[DAG]:
    assert entry.spec is not None
    spec_path = str(entry.path.resolve())
    params = {"max_checkpoint_age_seconds": _max_age_param(entry.spec.checkpoint.interval)}
    summary = f"barrierflow pipeline {entry.name!r} ({spec_path})"

    @dag(
        dag_id=dag_id_for(entry.name, "pipeline"),
        description=f"Run {summary}",
        doc_md=__doc__,
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        params=params,
        tags=TAGS,
    )
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

    @dag(
        dag_id=dag_id_for(entry.name, "supervise"),
        description=f"Check the latest completed checkpoint of {summary}",
        doc_md=__doc__,
        schedule=timedelta(minutes=5),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        params=params,
        tags=TAGS,
    )
    def supervision() -> None:
        supervise(spec_path, BARRIERFLOW_HOME)

    return [pipeline(), supervision()]


def _invalid_spec_dag(entry: DiscoveredPipeline) -> DAG:
    error = entry.error or "unknown error"

    @dag(
        dag_id=dag_id_for(entry.name, "pipeline"),
        description=f"INVALID SPEC {entry.path}: {error.splitlines()[-1].strip()}"[:1000],
        doc_md=f"{__doc__}\n## This spec does not load\n\n```\n{error}\n```\n",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        default_args=DEFAULT_ARGS,
        tags=[*TAGS, "invalid-spec"],
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
