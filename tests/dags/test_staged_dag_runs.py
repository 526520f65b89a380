"""The DAGs of a multi-stage pipeline, run the way Airflow runs them (``dag.test()``), on its
global checkpoints.

One two-stage pipeline (generator -> stage a -> channel ab on the test Kafka broker -> stage b
-> Parquet 2PC sink; bounded source) goes through its life in Airflow:

1. the launch DAG spark-submits the whole pipeline (one Spark application, the coordinator and
   both stages); the driver SIGKILLs itself right after global checkpoint 2's manifest is
   written (``BARRIERFLOW_CRASH_AT=after_global_manifest@2``), before stage b's sink commits
   epoch 2: the launch task fails, as a dead job does;
2. supervise, verify, retain, skew on the global checkpoints 1 and 2 (their XComs are the
   CLI's JSON documents); the checkpoints asset's watcher announces global checkpoint 2;
3. one file of a stage's checkpoint 2 is damaged: verify fails naming global checkpoint 2,
   the stage and the check;
4. the recovery DAG (checkpoint=latest-valid, restart=false) skips 2, naming the stage,
   restores global checkpoint 1 in every stage as attempt 1; reconcile then finds nothing in
   doubt against global checkpoint 1 (the restore aborted b's epoch 2);
5. the launch DAG runs the pipeline to the end: the committed output holds every source record
   exactly once, supervise passes, and the recovery sensor's condition (a completed global
   checkpoint of the new attempt) holds; the watcher announces the new global checkpoint.

Two spark-submits in all. The channels are on the test broker (``kafka_endpoint``, or a real
Kafka through ``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP``), so their records outlive the crashed run.
Not covered here: the recovery with restart=true (``dag.test()`` does not run the launch DAG
it triggers, so its sensor would wait for nothing); the sensor's condition is checked directly,
and tests/dags/test_airflow_rest_recovery.py runs that path through a real scheduler and API
server.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from barrierflow.airflow.assets import PipelineProgressTrigger
from barrierflow.airflow.runbook import first_checkpoint_of_attempt
from barrierflow.ops.checkpoints import list_checkpoints, show_checkpoint
from barrierflow.sinks.parquet import read_committed

from tests.airflow.test_asset_watcher import MemoryState, events
from tests.dags.conftest import run_dag
from tests.drivers import short_lived_driver_java_options
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.timeout(900)]

RECORDS = 400  # per source partition: several epochs before global checkpoint 2
LAUNCH, RECOVER = "barrierflow_pipeline__two", "barrierflow_recover__two"


def _spec(tmp_path: Path, endpoint: KafkaEndpoint, pipelines_dir: Path) -> Path:
    data = two_stage_spec(tmp_path, endpoint)
    data["stages"][0]["sources"][0]["records_per_partition"] = RECORDS
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2}
    data["checkpoint"]["retained"] = 3
    path = pipelines_dir / "two.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _damage_a_file_only_in(path: Path, chk: Path, checkpoint_id: int, older: int) -> tuple[str, Path]:
    """Flip one byte of a file that a stage's part of ``checkpoint_id`` stored and ``older``
    does not use (so ``older`` stays valid); returns the stage and the file."""
    new, old = show_checkpoint(path, checkpoint_id), show_checkpoint(path, older)
    for stage in ("a", "b"):
        kept = {f.sha256 for f in old.stages[stage].files}
        digests = sorted(f.sha256 for f in new.stages[stage].files if f.uploaded and f.sha256 not in kept)
        if digests:
            target = chk / "stages" / stage / "shared" / digests[0][:2] / digests[0]
            data = bytearray(target.read_bytes())
            data[len(data) // 2] ^= 0x01
            target.write_bytes(bytes(data))
            return stage, target
    raise AssertionError(f"no stage stored a new file in global checkpoint {checkpoint_id}")


def _watcher(path: Path, tmp_path: Path, state: MemoryState) -> PipelineProgressTrigger:
    trigger = PipelineProgressTrigger(spec_path=str(path), barrierflow_home=str(tmp_path), watched="checkpoints",
                                      poll_seconds=0.01)
    trigger.asset_state_store = state  # type: ignore[assignment]
    return trigger


@pytest.mark.slow(100)  # measured 87 s on a quiet machine (2026-11-25 22:48); 400-409 s at load average 16-28
def test_staged_pipeline_launch_checks_damage_recovery_and_run_to_the_end(
        monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path, kafka_endpoint: KafkaEndpoint) -> None:
    path = _spec(tmp_path, kafka_endpoint, pipelines_dir)
    chk, out = tmp_path / "chk", tmp_path / "out"
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # spark-submit
    monkeypatch.setenv("_JAVA_OPTIONS", short_lived_driver_java_options())  # the spark-submit drivers start faster

    # 1. The launch runs the whole pipeline in one spark-submit; the driver dies after global manifest 2.
    monkeypatch.setenv("BARRIERFLOW_CRASH_AT", "after_global_manifest@2")
    run = run_dag(monkeypatch, pipelines_dir, LAUNCH, max_checkpoint_age_seconds=3600)
    monkeypatch.delenv("BARRIERFLOW_CRASH_AT")
    assert run.task_states == {"launch": "failed", "supervise": "upstream_failed"}, run.log[-6000:]
    assert "--until-exhausted" in run.log and "--master local[2]" in run.log  # every source stage is bounded
    # the driver of every stage skips Spark's lookup of Python data sources (tests/spark/test_driver_jvm.py)
    assert f"spark.pyspark.driver.python={sys.executable}" in run.log, run.log[-6000:]
    listing = list_checkpoints(path)
    assert [m.checkpoint_id for m in listing.cuts] == [1, 2], run.log[-6000:]
    assert all(set(m.stages) == {"a", "b"} and m.attempt == 0 for m in listing.cuts)
    state = MemoryState()
    announced = events(_watcher(path, tmp_path, state), polls=3)
    assert [(e["id"], e["previous"]) for e in announced] == [(2, None)]  # the newest global checkpoint, once

    # 2. Supervision, verification, retention and the skew report on the global checkpoints.
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__two", max_checkpoint_age_seconds=3600)
    assert run.state == "success", run.log
    assert "latest completed global checkpoint finished" in run.log
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_verify__two")
    assert run.state == "success", run.log
    verified = run.xcom("verify")
    assert verified["verified"] == 2 and verified["failed"] == []
    assert all(set(r["stages"]) == {"a", "b"} for r in verified["reports"])
    assert any(c["name"] == "b: channel-cut" and c["status"] == "passed" for c in verified["reports"][0]["checks"])
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_retain__two")
    assert run.state == "success", run.log
    assert run.xcom("retain")["kept"] == [1, 2] and run.xcom("retain")["deleted"]["checkpoints"] == []
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_skew__two")
    assert run.state == "success", run.log
    skew = run.xcom("skew")
    assert skew["passed"] is True and set(skew["stages"]) == {"a", "b"}
    assert [c["checkpoint_id"] for c in skew["stages"]["b"]["checkpoints"]] == [1, 2]

    # 3. A damaged stage file: verify fails naming the global checkpoint, the stage and the check.
    stage, damaged = _damage_a_file_only_in(path, chk, 2, older=1)
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_verify__two")
    assert run.state == "failed" and run.task_states["verify"] == "failed"
    assert f"global checkpoint 2 failed (stage {stage}, check file): " in run.log, run.log[-6000:]
    assert "sha256 mismatch" in run.log and "(global checkpoint 2)" in run.log and damaged.name in run.log

    # 4. Recovery without restart: latest-valid skips 2 (naming the stage), restores 1 in every stage.
    run = run_dag(monkeypatch, pipelines_dir, RECOVER, checkpoint="latest-valid", restart=False)
    assert run.state == "success", run.log[-6000:]
    assert run.task_states == {"check_params_and_job": "success", "choose_checkpoint": "success",
                               "restore": "success", "restart": "skipped",
                               "wait_for_first_checkpoint": "skipped", "report": "success"}
    choice = run.xcom("choose_checkpoint")
    assert choice["checkpoint_id"] == 1 and [s["checkpoint_id"] for s in choice["skipped"]] == [2]
    assert f"{stage}: file: " in choice["skipped"][0]["reason"] and "sha256 mismatch" in choice["skipped"][0]["reason"]
    restored = run.xcom("restore")
    assert restored["noun"] == "global checkpoint" and restored["checkpoint_id"] == 1 and restored["attempt"] == 1
    assert [name for name, stage in restored["stages"].items() if stage["cutoff"]] == ["b"]
    summary = run.xcom("report")
    assert summary["checkpoint_id"] == 1 and summary["restarted"] is False
    assert "skipped global checkpoint 2" in summary["message"]
    listing = list_checkpoints(path)
    assert listing.attempt == 1 and listing.abandoned == [2]
    run = run_dag(monkeypatch, pipelines_dir, "barrierflow_reconcile__two")
    assert run.state == "success", run.log
    reconciled = run.xcom("reconcile")
    assert reconciled["latest_completed"] == 1 and reconciled["job_running"] is False
    assert reconciled["decisions"] == []  # the restore aborted b's epoch 2, which was never committed

    # 5. The launch runs to the end: every source record once in the committed output.
    run = run_dag(monkeypatch, pipelines_dir, LAUNCH, max_checkpoint_age_seconds=3600)
    assert run.state == "success", run.log[-8000:]
    assert run.task_states == {"launch": "success", "supervise": "success"}
    table = read_committed(f"file://{out}")
    assert table is not None
    seen = sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True))
    assert seen == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
    first_new = first_checkpoint_of_attempt(path, 1)  # the recovery sensor's condition after a restart
    newest = list_checkpoints(path).cuts[-1]
    assert first_new is not None and first_new > 2 and newest.attempt == 2
    announced = events(_watcher(path, tmp_path, state), polls=3)
    assert [(e["id"], e["previous"]) for e in announced] == [(newest.checkpoint_id, 2)]
    print(f"\nstaged DAGs: damaged {stage}'s {damaged.name[:12]}; restored global checkpoint 1; first global "
          f"checkpoint after the restart {first_new}, newest {newest.checkpoint_id}; {len(seen)} rows once")
