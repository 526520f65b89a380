"""DAG integrity: the whole dags/ folder parses offline, and every DAG follows the house rules.

Parsing happens in this process with ``DagBag`` (Airflow 3.3: ``airflow.dag_processing.dagbag``),
under the throwaway ``AIRFLOW_HOME`` set by ``conftest.py``; no metadata database is needed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.airflow.dag_ids import dag_id_for
from barrierflow.ops.discovery import discover_pipelines
from barrierflow.spec import load_spec

from tests.dags.conftest import BROKEN_SPEC_YAML, DAGS_FOLDER, PROJECT_ROOT, parse_dags, spec_yaml

REPO_PIPELINES = PROJECT_ROOT / "include" / "pipelines"


def single_stage_specs() -> list[Path]:
    """The repo's single-stage specs (multi-stage ones, such as stages.yaml, are checked in
    test_multi_stage_specs_get_the_streaming_dags_on_global_checkpoints)."""
    return [entry.path for entry in discover_pipelines(REPO_PIPELINES)
            if entry.spec is not None and not _staged(entry)]


def _staged(entry: Any) -> bool:
    """Whether a discovered spec loaded and is a pipeline of several stages (the test's own look:
    every loaded spec has stages; one of several stages has channels between them)."""
    return entry.spec is not None and bool(entry.spec.channels)


@pytest.fixture(scope="module")
def dagbag() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield parse_dags(monkeypatch)


@pytest.fixture
def tmp_dagbag(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path) -> Any:
    """dags/ parsed against a folder with a valid spec (opting into the chaos DAG), a broken one and
    a duplicate name."""
    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders", interval="0.2s") + "chaos:\n  dag: true\n",
                                               encoding="utf-8")
    (pipelines_dir / "broken.yaml").write_text(BROKEN_SPEC_YAML, encoding="utf-8")
    (pipelines_dir / "orders2.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    return parse_dags(monkeypatch, pipelines_dir)


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert dagbag.size() > 0


def test_every_dag_follows_the_house_rules(dagbag: Any, tmp_dagbag: Any) -> None:
    problems = []
    for bag in (dagbag, tmp_dagbag):
        for dag_id, dag in bag.dags.items():
            if not dag.tags or not {"barrierflow", "pipeline"} <= set(dag.tags):
                problems.append(f"{dag_id}: tags {dag.tags!r}")
            if (dag.default_args or {}).get("retries", 0) < 1:
                problems.append(f"{dag_id}: default_args has no retries >= 1")
            if dag.catchup is not False:
                problems.append(f"{dag_id}: catchup is not False")
            start = dag.start_date
            if start is None or start.tzinfo is None or start.utcoffset() != timedelta(0):
                problems.append(f"{dag_id}: start_date {start!r} is not a UTC datetime")
            if not dag.doc_md or not dag.doc_md.strip():
                problems.append(f"{dag_id}: no doc_md")
            if not dag.description:
                problems.append(f"{dag_id}: no description")
    assert problems == []


KINDS = ("pipeline", "supervise", "verify", "retain", "recover", "reconcile", "skew", "stop", "upgrade")
#: Only for a spec that opts in (`chaos: {dag: true}`): the multi-stage demos do, demo and bench do not.
CHAOS_DEMOS = ("stages-demo", "cycle-demo")
#: Only for a pipeline with a Parquet sink (a lake to read): rollups, the stream-vs-batch comparison, data quality;
#: with stages, per final stage with a Parquet sink (its id ends in __<stage>).
BATCH_KINDS = ("rollup", "recompute", "quality")


def test_the_dags_of_every_spec_and_the_batch_dags_of_every_lake_in_include_pipelines(dagbag: Any) -> None:
    entries = discover_pipelines(REPO_PIPELINES)
    expected = set()
    for entry in entries:
        if entry.spec is None:
            expected.add(dag_id_for(entry.name, "pipeline"))
        else:
            expected |= {dag_id_for(entry.name, kind) for kind in KINDS}
            if entry.spec.chaos is not None and entry.spec.chaos.dag:
                expected.add(dag_id_for(entry.name, "chaos"))
            if not _staged(entry) and entry.spec.stages[0].sinks[0].type == "parquet":
                expected |= {dag_id_for(entry.name, kind) for kind in BATCH_KINDS}
    # The multi-stage demos' final stages write Parquet; the cycle demo's is downstream of its cycle, so
    # its output cannot be recomputed in batch: no recompute DAG there.
    expected |= {f"barrierflow_{kind}__stages-demo__joined" for kind in BATCH_KINDS}
    expected |= {f"barrierflow_{kind}__cycle-demo__store" for kind in ("rollup", "quality")}
    assert {f"barrierflow_{kind}__demo" for kind in BATCH_KINDS} <= expected  # demo writes Parquet, bench discards
    assert set(dagbag.dag_ids) == expected
    assert {f"barrierflow_{kind}__{name}" for kind in ("verify", "retain", "recover", "reconcile", "skew")
            for name in ("demo", "bench", "stages-demo", "cycle-demo")} <= expected
    assert {f"barrierflow_chaos__{name}" for name in CHAOS_DEMOS} <= expected
    assert not {"barrierflow_chaos__demo", "barrierflow_chaos__bench"} & expected
    assert all(entry.error is None for entry in entries), "a spec in include/pipelines does not load"


def test_pipeline_dag_launches_the_job_then_supervises(dagbag: Any) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "pipeline")]
        assert dag.schedule is None and dag.max_active_runs == 1
        assert set(dag.task_ids) == {"launch", "supervise"}
        launch = dag.get_task("launch")
        assert isinstance(launch, SparkSubmitOperator)
        assert launch.application == str(PROJECT_ROOT / "jobs" / "run_pipeline.py")
        assert launch._conn_id == "spark_default"
        assert launch.application_args == ["--spec", str(spec_path.resolve())]
        assert (launch.conf or {}) == spec.spark.conf
        assert launch.env_vars["PYSPARK_PYTHON"] == sys.executable
        assert dag.get_task("supervise").upstream_task_ids == {"launch"}
        # checked right after the job ended: a minute more for the check to be scheduled
        assert_max_age_param(dag, max(1.0, 3 * spec.checkpoint.interval) + 60)
        assert launch.retries == 0  # the recovery DAG owns restarts
        assert dag.params["until_exhausted"] is False  # the repo's specs read unbounded sources


def test_supervise_dag_runs_every_five_minutes(dagbag: Any) -> None:
    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "supervise")]
        assert dag.task_ids == ["supervise"]
        assert dag.schedule == timedelta(minutes=5) and dag.max_active_runs == 1
        assert_max_age_param(dag, 3 * spec.checkpoint.interval)


def test_verify_dag_runs_on_the_spec_schedule_with_spec_defaults(dagbag: Any) -> None:
    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "verify")]
        assert dag.task_ids == ["verify"]
        # The shipped specs set no schedule: every 10 minutes, the newest checkpoint.retained, not deep;
        # and on every completed checkpoint (the checkpoint store's asset).
        assert verify_interval(dag) == timedelta(minutes=10) and dag.max_active_runs == 1
        assert dag.schedule.asset_condition.name == f"barrierflow/{spec.name}/checkpoints"
        assert_verify_params(dag, latest=spec.checkpoint.retained, deep=False)
        assert "(deep)" not in dag.description
        task = dag.get_task("verify")
        assert task.op_args[0] == str(spec_path.resolve())


def test_retain_dag_runs_every_fifteen_minutes(dagbag: Any) -> None:
    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "retain")]
        assert dag.task_ids == ["retain"]
        assert dag.schedule == timedelta(minutes=15) and dag.max_active_runs == 1
        assert f"newest {spec.checkpoint.retained} checkpoints" in dag.description
        assert dag.get_task("retain").op_args[0] == str(spec_path.resolve())


RECOVER_TASKS = ["check_params_and_job", "choose_checkpoint", "restore", "restart", "wait_for_first_checkpoint",
                 "report"]


def test_recover_dag_is_triggered_with_params_and_runs_the_runbook_in_order(dagbag: Any) -> None:
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import BaseSensorOperator

    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "recover")]
        assert dag.schedule is None and dag.max_active_runs == 1 and "recovery" in dag.tags
        assert {key: dag.params[key] for key in dag.params} == {
            "checkpoint": "latest-valid", "accept_duplicates": False, "restart": True, "wait_seconds": 600}
        checkpoint = dag.params.get_param("checkpoint").schema
        assert checkpoint["type"] == ["string", "integer"] and checkpoint["minimum"] == 1
        assert dag.params.get_param("accept_duplicates").schema["type"] == "boolean"
        assert dag.params.get_param("restart").schema["type"] == "boolean"
        wait = dag.params.get_param("wait_seconds").schema
        assert wait["type"] == "integer" and wait["minimum"] == 1

        assert [t.task_id for t in dag.topological_sort()] == RECOVER_TASKS
        upstream = {task_id: dag.get_task(task_id).upstream_task_ids for task_id in RECOVER_TASKS}
        assert upstream == {
            "check_params_and_job": set(),
            "choose_checkpoint": {"check_params_and_job"},
            "restore": {"check_params_and_job", "choose_checkpoint"},
            "restart": {"restore"},
            "wait_for_first_checkpoint": {"restore", "restart"},
            "report": {"check_params_and_job", "choose_checkpoint", "restore", "wait_for_first_checkpoint"},
        }
        for task_id in ("check_params_and_job", "choose_checkpoint", "restore"):
            assert dag.get_task(task_id).op_args[0] == str(spec_path.resolve())
        assert dag.get_task("check_params_and_job").retries == 0  # a bad param or a running job: fail at once
        restart = dag.get_task("restart")
        assert isinstance(restart, TriggerDagRunOperator)
        assert restart.trigger_dag_id == dag_id_for(spec.name, "pipeline")
        assert restart.wait_for_completion is False and restart.fail_when_dag_is_paused is True
        sensor = dag.get_task("wait_for_first_checkpoint")
        assert isinstance(sensor, BaseSensorOperator)
        assert sensor.mode == "poke" and sensor.poke_interval == 30 and sensor.timeout == 600
        assert sensor.spec_path == str(spec_path.resolve())
        assert dag.get_task("report").trigger_rule == "none_failed"  # also after a skipped restart


def test_reconcile_dag_runs_every_thirty_minutes(dagbag: Any) -> None:
    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "reconcile")]
        assert dag.task_ids == ["reconcile"]
        assert dag.schedule == timedelta(minutes=30) and dag.max_active_runs == 1
        assert dag.get_task("reconcile").op_args[0] == str(spec_path.resolve())


def test_skew_dag_runs_hourly_without_retrying_its_task(dagbag: Any) -> None:
    for spec_path in single_stage_specs():
        spec = load_spec(spec_path)
        dag = dagbag.dags[dag_id_for(spec.name, "skew")]
        assert dag.task_ids == ["skew"]
        assert dag.schedule == timedelta(hours=1) and dag.max_active_runs == 1
        assert "data-quality" in dag.tags
        task = dag.get_task("skew")
        assert task.op_args[0] == str(spec_path.resolve())
        assert task.retries == 0  # a failed expectation fails again; the next hourly run looks anew


def test_new_dags_serialize_for_the_scheduler(dagbag: Any) -> None:
    """The scheduler and UI work on serialized DAGs: the custom sensor, the restart's
    pre_execute hook and the multi-type param must survive the round trip."""
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id in ("barrierflow_recover__demo", "barrierflow_reconcile__demo", "barrierflow_skew__demo"):
        back = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags[dag_id]))
        assert back.task_ids == dagbag.dags[dag_id].task_ids
    back = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags["barrierflow_recover__demo"]))
    assert back.get_task("report").trigger_rule == "none_failed"
    assert not back.get_task("wait_for_first_checkpoint").reschedule  # poke mode


def test_verify_dag_takes_schedule_count_and_depth_from_the_spec(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path
) -> None:
    settings = "verification:\n  interval: 30 minutes\n  latest: 2\n  deep: true\n"
    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders") + settings, encoding="utf-8")
    (pipelines_dir / "fast.yaml").write_text(
        spec_yaml("fast") + "verification:\n  interval: 10s\n", encoding="utf-8")

    bag = parse_dags(monkeypatch, pipelines_dir)

    assert bag.import_errors == {}
    dag = bag.dags["barrierflow_verify__orders"]
    assert verify_interval(dag) == timedelta(minutes=30)
    assert_verify_params(dag, latest=2, deep=True)
    assert "newest 2 checkpoints (deep)" in dag.description
    # A schedule below a minute is a spec error, shown as a failing DAG like any other.
    assert "barrierflow_verify__fast" not in bag.dag_ids
    assert "at most once a minute" in bag.dags["barrierflow_pipeline__fast"].description


def verify_interval(dag: Any) -> timedelta:
    """The time part of the verification DAG's schedule (it also runs on its checkpoint asset)."""
    from airflow.sdk import AssetOrTimeSchedule

    assert isinstance(dag.schedule, AssetOrTimeSchedule), dag.schedule
    return dag.schedule.timetable.delta


def assert_verify_params(dag: Any, latest: int, deep: bool) -> None:
    count = dag.params.get_param("latest")
    assert count.value == latest and count.schema["type"] == "integer" and count.schema["minimum"] == 1
    depth = dag.params.get_param("deep")
    assert depth.value is deep and depth.schema["type"] == "boolean"


def assert_max_age_param(dag: Any, default: float) -> None:
    param = dag.params.get_param("max_checkpoint_age_seconds")
    assert param.value == pytest.approx(max(1.0, default))
    assert param.schema["type"] == "number" and param.schema["minimum"] == 1


def test_broken_spec_yields_a_visible_failing_dag(tmp_dagbag: Any) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    assert tmp_dagbag.import_errors == {}
    assert set(tmp_dagbag.dag_ids) == {
        "barrierflow_pipeline__orders",
        "barrierflow_supervise__orders",
        "barrierflow_verify__orders",
        "barrierflow_retain__orders",
        "barrierflow_recover__orders",
        "barrierflow_reconcile__orders",
        "barrierflow_skew__orders",
        "barrierflow_stop__orders",
        "barrierflow_upgrade__orders",
        "barrierflow_chaos__orders",
        "barrierflow_pipeline__broken",
        "barrierflow_pipeline__orders2",
    }
    broken = tmp_dagbag.dags["barrierflow_pipeline__broken"]
    assert "invalid-spec" in broken.tags
    assert broken.task_ids == ["invalid_spec"]
    assert "checkpoint_intervall" in broken.doc_md and "INVALID SPEC" in broken.description
    with pytest.raises(AirflowFailException, match=r"(?s)checkpoint\.storage.*checkpoint_intervall"):
        broken.get_task("invalid_spec").python_callable()

    duplicate = tmp_dagbag.dags["barrierflow_pipeline__orders2"]
    with pytest.raises(AirflowFailException, match="already used by"):
        duplicate.get_task("invalid_spec").python_callable()

    # A sub-second checkpoint interval still gets a max-age default that satisfies minimum=1.
    assert_max_age_param(tmp_dagbag.dags["barrierflow_supervise__orders"], 0.6)


def test_parsing_touches_no_connection_or_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.models.connection import Connection as ModelConnection
    from airflow.sdk import BaseHook, Connection, Variable

    calls: list[str] = []

    def forbidden(what: str):
        def fail(*args: object, **kwargs: object) -> None:
            calls.append(f"{what}{args}")
            raise AssertionError(f"DAG parsing called {what}")

        return fail

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "")
    monkeypatch.setattr(BaseHook, "get_connection", classmethod(forbidden("BaseHook.get_connection")))
    monkeypatch.setattr(Connection, "get", classmethod(forbidden("Connection.get")))
    monkeypatch.setattr(
        ModelConnection, "get_connection_from_secrets",
        classmethod(forbidden("Connection.get_connection_from_secrets")),
    )
    monkeypatch.setattr(Variable, "get", staticmethod(forbidden("Variable.get")))

    bag = parse_dags(monkeypatch)

    assert bag.import_errors == {}
    assert calls == []
    assert bag.size() > 0


#: What a DAG file must not import while the DAG processor parses it: Spark, the clients of
#: Kafka and S3, the data-quality and table libraries. Each costs seconds of every parse (the
#: processor re-parses every file every 30 s); tasks import them when they run.
PARSE_FORBIDDEN = ("pyspark", "py4j", "kafka", "confluent_kafka", "boto3", "botocore", "great_expectations",
                   "pyiceberg", "deltalake", "pyarrow", "pandas")


def test_parsing_imports_no_spark_or_client_library(tmp_path: Path) -> None:
    """Parsing is cheap by construction, not by a clock: a fresh interpreter that parses dags/
    (every repository spec) has imported none of :data:`PARSE_FORBIDDEN`."""
    probe = (
        "import sys, json\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS_FOLDER)!r}, safe_mode=False)\n"
        "print(json.dumps({'dags': bag.size(), 'errors': list(bag.import_errors),\n"
        "                  'modules': sorted({m.split('.')[0] for m in sys.modules})}))\n"
    )
    env = {**os.environ, "BARRIERFLOW_PIPELINES_DIR": str(REPO_PIPELINES), "AIRFLOW_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == [] and parsed["dags"] > 0, parsed
    assert sorted(set(parsed["modules"]) & set(PARSE_FORBIDDEN)) == []


def test_supervise_task_reports_the_checkpoint_age(
    tmp_dagbag: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow.sdk
    import barrierflow.ops.progress as progress
    from airflow.sdk.exceptions import AirflowFailException

    task = tmp_dagbag.dags["barrierflow_supervise__orders"].get_task("supervise")
    latest: list[datetime | None] = [None]
    context = {"params": {"max_checkpoint_age_seconds": 60}}
    monkeypatch.setattr(progress, "newest_completion_time", lambda pipeline: latest[0])
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: context)
    monkeypatch.setenv("BARRIERFLOW_HOME", str(PROJECT_ROOT))  # the task sets it if unset

    # AirflowFailException: failed at once, not retried; the next scheduled run checks again.
    with pytest.raises(AirflowFailException, match="'orders' has no completed checkpoint"):
        task.python_callable(*task.op_args, **task.op_kwargs)

    latest[0] = datetime.now(UTC) - timedelta(seconds=90)
    with pytest.raises(AirflowFailException, match="older than the limit of 60s"):
        task.python_callable(*task.op_args, **task.op_kwargs)

    latest[0] = datetime.now(UTC) - timedelta(seconds=5)
    assert "limit 60s" in task.python_callable(*task.op_args, **task.op_kwargs)


def test_batch_dags_read_the_lake_on_the_output_asset_and_daily(dagbag: Any) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable

    spec_path = (REPO_PIPELINES / "demo.yaml").resolve()
    for kind, tasks, job in (("rollup", ["rollup", "rollup_report"], "rollup"),
                             ("recompute", ["compare", "recompute"], "recompute"),
                             ("quality", ["validate"], None)):
        dag = dagbag.dags[dag_id_for("demo", kind)]
        assert sorted(dag.task_ids) == tasks and dag.max_active_runs == 1
        if job is not None:
            submit = dag.get_task(job)
            assert isinstance(submit, SparkSubmitOperator) and submit.retries == 0
            assert submit.application == str(PROJECT_ROOT / "jobs" / "batch_job.py")
            assert submit.application_args[0] == job and str(spec_path) in submit.application_args
            assert "{{ run_id }}" in submit.application_args  # the report names the run that wrote it
        if kind == "recompute":
            assert isinstance(dag.schedule, CronTriggerTimetable)  # daily: it reads the whole closed range
        else:
            assert isinstance(dag.schedule, AssetOrTimeSchedule)
            assert dag.schedule.asset_condition.name == "barrierflow/demo/output"
            assert isinstance(dag.schedule.timetable, CronTriggerTimetable)
    assert dagbag.dags["barrierflow_rollup__demo"].params["day"] == ""
    assert dagbag.dags["barrierflow_quality__demo"].params["epochs"] == 3


def test_a_pipeline_writing_tables_gets_the_batch_dags_and_the_maintenance_dag(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    """A spec whose stage writes an Iceberg table and a Delta table: the batch DAGs work on its
    first table (output asset named after the Iceberg table, which has no path of its own), and
    the table maintenance DAG runs daily with its params; a spec writing no table gets none."""
    from airflow.sdk import CronTriggerTimetable
    from airflow.serialization.serialized_objects import DagSerialization

    tables = (spec_yaml("tables").replace("  - type: discard\n", "  - {name: ice, type: iceberg, table: lake.totals}\n"
                                          f"  - {{name: dl, type: delta, path: 'file://{tmp_path / 'dl'}'}}\n")
              .replace("keyed_window_counts", "keyed_window_counts\n  output_mode: append")
              + "event_time:\n  column: event_time\n  watermark_delay: 1s\n")
    (pipelines_dir / "tables.yaml").write_text(tables, encoding="utf-8")
    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    bag = parse_dags(monkeypatch, pipelines_dir)

    assert bag.import_errors == {}
    assert {f"barrierflow_{kind}__tables" for kind in (*BATCH_KINDS, "maintain")} <= set(bag.dag_ids)
    assert not {d for d in bag.dag_ids if d.endswith("__orders") and ("maintain" in d or "rollup" in d)}
    maintain = bag.dags["barrierflow_maintain__tables"]
    assert maintain.task_ids == ["maintain"] and isinstance(maintain.schedule, CronTriggerTimetable)
    assert maintain.params["older_than_hours"] == 0.0 and maintain.params["retention_hours"] == 168
    rollup = bag.dags["barrierflow_rollup__tables"]
    assert rollup.schedule.asset_condition.uri == "iceberg://barrierflow/lake.totals"
    DagSerialization.to_dict(maintain)


def test_asset_scheduled_dags_serialize_with_their_watchers(dagbag: Any) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    for kind in ("verify", "rollup", "quality", "recompute"):
        dag = dagbag.dags[dag_id_for("demo", kind)]
        back = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        assert sorted(back.task_ids) == sorted(dag.task_ids)
    watchers = dagbag.dags["barrierflow_verify__demo"].schedule.asset_condition.watchers
    assert [w.trigger.serialize()[0] for w in watchers] == ["barrierflow.airflow.assets.PipelineProgressTrigger"]


def test_multi_stage_specs_get_the_streaming_dags_on_global_checkpoints(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path) -> None:
    """A valid multi-stage spec (the repo's three-stage demo) gets the eight streaming DAGs, no
    batch DAGs (see the DAG module's docstring); its launch runs the whole pipeline through
    spark-submit of jobs/run_pipeline.py, until exhausted by default (every source stage is
    bounded), and its verification runs on the checkpoints asset. A multi-stage spec that does
    not load gets the failing invalid-spec DAG with its error; the other specs keep theirs."""
    import shutil

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    shutil.copy(REPO_PIPELINES / "stages.yaml", pipelines_dir / "stages.yaml")
    (pipelines_dir / "orders.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    broken = (REPO_PIPELINES / "stages.yaml").read_text(encoding="utf-8").replace(
        "name: stages-demo", "name: stages-broken").replace(
        "channel: payments\n        max", "channel: nowhere\n        max")
    (pipelines_dir / "stages_broken.yaml").write_text(broken, encoding="utf-8")

    entries = discover_pipelines(pipelines_dir)
    assert [(e.name, _staged(e)) for e in entries] == [("orders", False), ("stages-demo", True),
                                                         ("stages_broken", False)]
    assert entries[2].error is not None and "nowhere" in entries[2].error

    bag = parse_dags(monkeypatch, pipelines_dir)
    assert bag.import_errors == {}
    staged = {d for d in bag.dag_ids if d.endswith("__stages-demo")}
    assert staged == {dag_id_for("stages-demo", kind) for kind in (*KINDS, "chaos")}  # stages.yaml opts into chaos
    assert "invalid-spec" in bag.dags["barrierflow_pipeline__stages_broken"].tags
    assert {dag_id_for("orders", kind) for kind in KINDS} <= set(bag.dag_ids)
    assert dag_id_for("orders", "chaos") not in bag.dag_ids

    spec_path = str((pipelines_dir / "stages.yaml").resolve())
    launch_dag = bag.dags[dag_id_for("stages-demo", "pipeline")]
    launch = launch_dag.get_task("launch")
    assert isinstance(launch, SparkSubmitOperator) and launch.retries == 0
    assert launch.application == str(PROJECT_ROOT / "jobs" / "run_pipeline.py")
    assert launch.application_args == ["--spec", spec_path]
    assert launch_dag.params["until_exhausted"] is True  # both source stages read bounded generators
    assert launch_dag.get_task("supervise").upstream_task_ids == {"launch"}
    verify = bag.dags[dag_id_for("stages-demo", "verify")]
    assert verify.schedule.asset_condition.name == "barrierflow/stages-demo/checkpoints"
    assert [t.task_id for t in bag.dags[dag_id_for("stages-demo", "recover")].topological_sort()] == RECOVER_TASKS
    for kind in ("supervise", "verify", "retain", "reconcile", "skew"):
        assert bag.dags[dag_id_for("stages-demo", kind)].get_task(kind).op_args[0] == spec_path
    assert "per *final stage with a Parquet sink*" in launch_dag.doc_md


def test_a_final_parquet_stage_gets_the_batch_dags_on_its_own_output_asset(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path) -> None:
    """The three-stage demo's final stage ``joined`` writes Parquet: its rollup, recompute and
    quality DAGs pass ``--stage joined`` (to the batch job and to the report and validation
    tasks) and the rollup and quality DAGs run on the stage's own output asset."""
    import shutil

    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable

    shutil.copy(REPO_PIPELINES / "stages.yaml", pipelines_dir / "stages.yaml")
    bag = parse_dags(monkeypatch, pipelines_dir)
    assert bag.import_errors == {}
    spec_path = str((pipelines_dir / "stages.yaml").resolve())
    assert {d for d in bag.dag_ids if d.endswith("__joined")} == {
        f"barrierflow_{kind}__stages-demo__joined" for kind in BATCH_KINDS}
    for kind, job, report in (("rollup", "rollup", "rollup_report"), ("recompute", "recompute", "compare"),
                              ("quality", None, "validate")):
        dag = bag.dags[f"barrierflow_{kind}__stages-demo__joined"]
        assert "final stage 'joined'" in dag.description and {"barrierflow", "pipeline"} <= set(dag.tags)
        if job is not None:
            args = dag.get_task(job).application_args
            assert args[0] == job and args[args.index("--spec") + 1] == spec_path
            assert args[args.index("--stage") + 1] == "joined"
        assert list(dag.get_task(report).op_args) == [spec_path, str(PROJECT_ROOT), "joined"]
        if kind == "recompute":
            assert isinstance(dag.schedule, CronTriggerTimetable)
        else:
            assert isinstance(dag.schedule, AssetOrTimeSchedule)
            asset = dag.schedule.asset_condition
            assert asset.name == "barrierflow/stages-demo/joined/output"
            assert asset.uri == f"file://{PROJECT_ROOT / 'var' / 'stages-demo' / 'output'}"
            (watcher,) = asset.watchers
            assert watcher.trigger.serialize()[1]["stage"] == "joined"


#: Number words the docs use for DAG counts.
NUMBER_WORDS = {w: n for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
ORDINAL_WORDS = {w: n for n, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split())}


def test_the_docs_dag_counts_are_the_dagbags(dagbag: Any) -> None:
    """README.md and docs/airflow.md say how many DAGs a spec gets: the numbers are what dags/
    makes of include/pipelines (every spec's kinds; the chaos DAG of the specs that opt in; the
    batch DAGs per lake), not literals kept by hand."""
    kinds: dict[str, set[str]] = {}
    lakes: dict[str, set[str]] = {}
    for dag_id in dagbag.dag_ids:
        kind, _, rest = dag_id.removeprefix("barrierflow_").partition("__")
        kinds.setdefault(rest, set()).add(kind)
    names = {entry.name for entry in discover_pipelines(REPO_PIPELINES)}
    every_spec = set.intersection(*(kinds[name] for name in names))
    for target, target_kinds in kinds.items():  # a lake: "<name>__<stage>", or the batch kinds of a single stage
        lake_kinds = target_kinds - every_spec - {"chaos"}
        if lake_kinds:
            lakes[target] = lake_kinds
    per_lake = max(len(k) for k in lakes.values())
    assert "chaos" not in every_spec and any("chaos" in kinds[name] for name in names)

    readme = " ".join((PROJECT_ROOT / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"(\w+) per pipeline \(([^)]*)\), chaos for a spec that opts in[^,]*, and up to (\w+) per "
                     r"committed Parquet lake", readme)
    assert said, "README.md no longer says how many DAGs a pipeline gets"
    assert NUMBER_WORDS[said.group(1)] == len(every_spec), f"README.md: {said.group(0)}; dags/: {sorted(every_spec)}"
    assert len(said.group(2).split(", ")) == len(every_spec), f"README.md lists {said.group(2)}: {sorted(every_spec)}"
    assert NUMBER_WORDS[said.group(3)] == per_lake, f"README.md: {said.group(0)}; per lake: {lakes}"

    airflow = " ".join((PROJECT_ROOT / "docs" / "airflow.md").read_text(encoding="utf-8").split())
    said = re.search(r"\*\*(\w+) DAGs per spec\*\*.*?a (\w+), the chaos DAG,.*?\*\*up to (\w+) more per committed "
                     r"Parquet lake\*\*", airflow)
    assert said, "docs/airflow.md no longer says how many DAGs a spec gets"
    assert NUMBER_WORDS[said.group(1)] == len(every_spec), f"docs/airflow.md: {sorted(every_spec)}"
    assert ORDINAL_WORDS[said.group(2)] == len(every_spec) + 1
    assert NUMBER_WORDS[said.group(3)] == per_lake, f"docs/airflow.md; per lake: {lakes}"
    table = set(re.findall(r"^\| `barrierflow_(\w+?)__<name>`", (PROJECT_ROOT / "docs" / "airflow.md").read_text(
        encoding="utf-8"), re.MULTILINE))
    assert table == set().union(*kinds.values()), "docs/airflow.md's table of DAGs is not the set dags/ makes"
