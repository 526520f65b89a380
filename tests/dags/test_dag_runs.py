"""Every DAG kind, run the way Airflow runs it: ``dag.test()``.

Unlike the unit tests of the task functions (``test_recovery_dags.py`` and friends call a
task's callable), these go through Airflow's own execution: the Task SDK resolves each
task's arguments (a task argument named after a context key, e.g. ``params``, fails here
exactly as in a deployment), XComs pass between tasks, params are validated against their
schema, and trigger rules decide what runs. Stores come from the Spark-free factories; the
launch DAG runs the real job through spark-submit.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.lease import JobLease
from barrierflow.recovery.restart_guard import mark_recovery, read_recovery_marker
from barrierflow.sinks.factory import build_sink
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.workdir.layout import JobLayout

from tests.dags.conftest import run_dag
from tests.pipeline_specs import spec_dict, write_spec
from tests.recovery import fake_pipeline
from tests.reports.skew_store import healthy_store
from tests.scenarios.harness import windowed_spec
from tests.verification.checkpoint_factory import CheckpointFactory

pytestmark = pytest.mark.usefixtures("airflow_db")

LAUNCH = "barrierflow_pipeline__t"
RECOVER = "barrierflow_recover__t"


@pytest.fixture
def spec_path(tmp_path: Path, pipelines_dir: Path) -> Path:
    data = spec_dict(tmp_path)
    data["checkpoint"]["retained"] = 2
    return write_spec(pipelines_dir, data, "t.yaml")


def flip_newest(factory: CheckpointFactory, count: int) -> None:
    manifest = factory.take(count)[-1]
    target = factory.shared_path(manifest, f"state/0/1/{manifest.state_version}.delta")
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))


# -- recovery -------------------------------------------------------------------------------


def test_recover_dag_restores_the_newest_valid_checkpoint(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    flip_newest(CheckpointFactory(tmp_path, ledger_sink=False), 4)

    run = run_dag(monkeypatch, pipelines_dir, RECOVER, checkpoint="latest-valid", restart=False)

    assert run.state == "success", run.log
    assert run.task_states == {"check_params_and_job": "success", "choose_checkpoint": "success",
                               "restore": "success", "restart": "skipped",
                               "wait_for_first_checkpoint": "skipped", "report": "success"}
    choice = run.xcom("choose_checkpoint")
    assert choice["checkpoint_id"] == 3 and [s["checkpoint_id"] for s in choice["skipped"]] == [4]
    assert run.xcom("restore")["attempt"] == 1 and run.xcom("restore")["abandoned"] == [4]
    summary = run.xcom("report")
    assert summary["checkpoint_id"] == 3 and summary["restarted"] is False
    assert CheckpointStore.for_spec(load_spec(spec_path)).attempt() == 1
    marker = read_recovery_marker(tmp_path / "work")
    assert marker is not None and marker.run_id == run.run_id and marker.dag_id == RECOVER


def test_recover_dag_fails_naming_a_missing_checkpoint(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    CheckpointFactory(tmp_path, ledger_sink=False).take(2)

    run = run_dag(monkeypatch, pipelines_dir, RECOVER, checkpoint=9, restart=False)

    assert run.state == "failed"
    assert run.task_states["check_params_and_job"] == "success"
    assert run.task_states["choose_checkpoint"] == "failed"
    assert run.task_states["restore"] == "upstream_failed"
    assert "checkpoint 9 of pipeline t does not exist" in run.log
    assert CheckpointStore.for_spec(load_spec(spec_path)).attempt() == 0  # nothing restored


def test_recover_dag_refuses_a_bad_param_at_trigger_time(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="checkpoint"):
        run_dag(monkeypatch, pipelines_dir, RECOVER, checkpoint="yesterday")


# -- reconcile, verify, retain, supervise, skew -----------------------------------------------


def test_reconcile_dag_finishes_in_doubt_transactions(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    spec_path, _spec, store = fake_pipeline.parquet_pipeline(tmp_path, 2, pipelines_dir)
    spec = load_spec(spec_path)
    sink = build_sink(spec, store, JobLayout.for_spec(spec), attempt=0)
    write_ahead_batch(f"file://{tmp_path / 'out' / '_staging'}", 2, pa.table({"key": [3], "n": [3]}))
    in_doubt = str(sink.pre_commit_epoch(3, 2)[0]["transaction_id"])  # epoch 3: its checkpoint never completed

    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_reconcile__t")

    assert run.state == "success", run.log
    decisions = run.xcom("reconcile")["decisions"]
    assert [(d["transaction_id"], d["action"]) for d in decisions] == [(in_doubt, "ABORT")]
    assert TransactionLedger(store.objects, "t").get("out", 3).state is TxnState.ABORTED


def test_verify_dag_passes_then_fails_naming_the_damaged_checkpoint(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(3)
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_verify__t")
    assert run.state == "success", run.log
    assert run.xcom("verify")["verified"] == 2 and run.xcom("verify")["failed"] == []

    flip_newest(factory, 1)
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_verify__t", latest=3)
    assert run.state == "failed" and run.task_states["verify"] == "failed"
    assert "(checkpoint 4)" in run.log and "sha256 mismatch" in run.log


def test_retain_dag_keeps_the_newest_checkpoints(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    CheckpointFactory(tmp_path).take(4)

    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_retain__t")

    assert run.state == "success", run.log
    summary = run.xcom("retain")
    assert summary["kept"] == [3, 4] and summary["deleted"]["checkpoints"] == [1, 2]
    assert [m.checkpoint_id for m in CheckpointStore.for_spec(load_spec(spec_path)).completed()] == [3, 4]


def test_supervise_dag_fails_without_a_checkpoint_and_passes_with_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t")
    assert run.state == "failed" and "no completed checkpoint" in run.log

    CheckpointFactory(tmp_path).take(1)
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t", max_checkpoint_age_seconds=3600)
    assert run.state == "success", run.log


def test_skew_dag_reports_on_the_store(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path) -> None:
    write_spec(pipelines_dir, spec_dict(tmp_path), "t.yaml")
    healthy_store(tmp_path)

    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_skew__t")

    assert run.state == "success", run.log
    assert run.xcom("skew")["passed"] is True and run.xcom("skew")["stages"]["t"]["idle_partitions"] == ["events/2"]


# -- the launch DAG: the restart guard and the master -------------------------------------------


def test_launch_refuses_while_a_restore_holds_the_lease(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    with JobLease(tmp_path / "work", "t", purpose="restore"):
        run = run_dag(monkeypatch, pipelines_dir, LAUNCH)

    assert run.state == "failed" and run.task_states["launch"] == "failed"
    assert "is being restored" in run.log and "Spark was not started" in run.log
    assert "Spark-Submit cmd" not in run.log
    assert not (tmp_path / "work" / "spark-checkpoint").exists()


def test_launch_refuses_while_a_recovery_run_is_active(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path, tmp_path: Path
) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t")  # puts the pipeline's DAGs in the database
    with create_session() as session:
        session.add(DagRun(dag_id=RECOVER, run_id="manual__stuck-recovery", run_type=DagRunType.MANUAL,
                           state=DagRunState.RUNNING))
    mark_recovery(spec_path, RECOVER, "manual__stuck-recovery")
    try:
        run = run_dag(monkeypatch, pipelines_dir, LAUNCH)
        assert run.state == "failed" and run.task_states["launch"] == "failed"
        assert "recovery run 'manual__stuck-recovery' of DAG 'barrierflow_recover__t'" in run.log
        assert "owns the restart" in run.log and "Spark was not started" in run.log
        assert "Spark-Submit cmd" not in run.log
    finally:
        with create_session() as session:
            session.query(DagRun).filter(DagRun.run_id == "manual__stuck-recovery").delete()


def test_launch_task_is_never_retried(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path) -> None:
    from tests.dags.conftest import parse_dags

    assert parse_dags(monkeypatch, pipelines_dir).dags[LAUNCH].get_task("launch").retries == 0


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_launch_runs_a_bounded_job_on_the_spec_master_without_a_spark_connection(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    data = yaml.safe_load(windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                                        records=3000, per_batch=600).read_text(encoding="utf-8"))
    data["name"] = "t"
    data["spark"]["master"] = "local[1]"
    spec_path = write_spec(pipelines_dir, data, "t.yaml")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit

    run = run_dag(monkeypatch, pipelines_dir, LAUNCH, max_checkpoint_age_seconds=3600)

    assert run.state == "success", run.log[-5000:]
    assert run.task_states == {"launch": "success", "supervise": "success"}
    assert "no Airflow connection 'spark_default'" in run.log and "--master local[1]" in run.log
    # its driver JVM skips Spark's lookup of Python data sources (tests/spark/test_driver_jvm.py)
    assert f"spark.pyspark.driver.python={sys.executable}" in run.log, run.log[-5000:]
    assert "--until-exhausted" in run.log  # the param's default for a bounded source
    completed = CheckpointStore.for_spec(load_spec(spec_path)).completed()
    assert completed, "the job completed no checkpoint"
    table = read_committed(f"file://{out}")
    assert table is not None and table.num_rows > 0, run.log[-8000:]
    rows = table.to_pylist()
    assert len({json.dumps(r, sort_keys=True, default=str) for r in rows}) == len(rows)  # no row twice
