"""A pipeline outlives a restart of all of Airflow, through a real Airflow: scheduler, DAG
processor, API server and triggerer on 127.0.0.1 (temporary home, SQLite, LocalExecutor),
driven only through the REST API.

1. The launch DAG of a small pipeline (generator throttled by ``rows_per_second``, more records
   than it can read within the test -> projection of each record's partition and offset ->
   Parquet through 2PC) is triggered. Its ``launch`` task starts the pipeline detached and
   defers: the REST API shows it ``deferred`` (no worker slot held) while the pipeline completes
   checkpoints.
2. Every Airflow process is stopped (SIGTERM, then SIGKILL of each process group). The pipeline
   keeps running: its launcher lives, and checkpoints keep completing without Airflow.
3. Airflow is started again on the same home (same metadata database). The launch task is still
   ``deferred``, on its first try: the triggerer rebuilt the trigger from the database.
4. The stop DAG, triggered through the REST API, stops the pipeline with a savepoint; the
   trigger, rebuilt by the new triggerer, sees the job end with exit 0 and the task succeeds
   (then ``supervise``). The committed output holds every record the savepoint covers exactly
   once; one launch, one run lease. (The test, not the source's length, decides when the
   pipeline ends: it cannot end before Airflow is back, however slow the machine.)

Prints the bound: how long the pipeline ran without a working Airflow (from the stop until all
components are healthy again) and how many checkpoints completed meanwhile; nothing lost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.lease import lease_state
from barrierflow.ops.detached_launch import LaunchRecord, launcher_alive, read_exit
from barrierflow.pipeline.model import open_pipeline
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.dags.conftest import DAGS_FOLDER
from tests.drivers import short_lived_driver_java_options
from tests.support.airflow_server import COMPONENTS, AirflowServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600), pytest.mark.slow(90)]

LAUNCH, STOP = "barrierflow_pipeline__outlive", "barrierflow_stop__outlive"
#: Per partition: at RATE records/s the source would last RECORDS / RATE = 1,000 s; the test
#: stops the pipeline (the stop DAG, with a savepoint) once Airflow is back.
PARTITIONS, RECORDS, RATE = 2, 10_000, 10.0


def write_spec(tmp_path: Path, pipelines: Path) -> Path:
    data = {
        "version": 1,
        "name": "outlive",
        "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": RATE,
                     "max_records_per_batch": 100, "keys": 7, "records_per_partition": RECORDS}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"src_partition": "partition", "src_offset": "offset",
                                                   "value": "value"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}],
        "trigger": {"interval": "500ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "1s", "timeout": "120s"},
        "spark": {"master": "local[1]", "shuffle_partitions": 1},
    }
    path = pipelines / "outlive.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def through(offsets: dict[str, int]) -> list[tuple[int, int]]:
    """Every record the source offsets cover, once: what the committed output must be."""
    return sorted((int(partition), offset) for partition, end in offsets.items() for offset in range(end))


def committed(out: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{out}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))


def test_a_deferred_pipeline_outlives_a_restart_of_all_of_airflow_exactly_once(tmp_path: Path) -> None:
    started = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name} {time.monotonic() - started:.1f}")
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    spec_path = write_spec(tmp_path, pipelines)
    pipeline = open_pipeline(spec_path)

    def completed() -> list[int]:
        return list(pipeline.cuts.completed_ids())

    server = AirflowServer(tmp_path / "airflow-home", DAGS_FOLDER, components=(*COMPONENTS, "triggerer"), env={
        "BARRIERFLOW_PIPELINES_DIR": str(pipelines),
        "BARRIERFLOW_LAUNCH_WATCH_SECONDS": "1",
        "BARRIERFLOW_ASSET_POLL_SECONDS": "30",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", ""),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "_JAVA_OPTIONS": short_lived_driver_java_options(),
    })
    try:
        server.start()
        server.wait_for(lambda: server.api("GET", f"/dags/{LAUNCH}").status_code == 200, 120,
                        "the pipeline's DAGs to be parsed")
        for dag_id in (LAUNCH, STOP):
            assert server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).status_code == 200
        phase("airflow up")

        # 1. Launched, deferred, checkpointing.
        run_id = server.trigger(LAUNCH)
        server.wait_for(lambda: server.task_instance(LAUNCH, run_id, "launch")["state"] == "deferred", 120,
                        "the launch task to defer")
        phase("deferred")
        server.wait_for(completed, 180, "a completed checkpoint of the launched pipeline")
        phase("first checkpoint")
        [record_path] = (tmp_path / "work" / "launches").glob("*[0-9a-f].json")
        record = LaunchRecord.read(record_path)
        assert launcher_alive(record) and read_exit(record) is None
        assert os.getsid(record.pid) != os.getsid(0) and os.getsid(record.pid) == record.pid  # its own session

        # 2. All of Airflow stopped; the pipeline keeps checkpointing without it.
        stopping_at, before_stop = time.monotonic(), set(completed())
        server.stop()
        phase("airflow stopped")
        down_at, before_down = time.monotonic(), set(completed())
        assert launcher_alive(record), Path(record.log).read_text(encoding="utf-8")[-3000:]
        deadline = time.monotonic() + 60
        while not set(completed()) - before_down:
            assert time.monotonic() < deadline, "no checkpoint completed while Airflow was down"
            time.sleep(0.2)
        phase("a checkpoint without airflow")
        lease = lease_state(pipeline.objects)
        assert lease is not None and lease["live"], lease

        # 3. Airflow back on the same home: the task is still deferred, on its first try.
        server.start(migrate=False)
        up_at = time.monotonic()
        phase("airflow up again")
        during = sorted(set(completed()) - before_stop)
        assert read_exit(record) is None, f"the pipeline ended before Airflow was back: {phases}"
        launch = server.task_instance(LAUNCH, run_id, "launch")
        assert launch["state"] == "deferred" and launch["try_number"] == 1, launch

        # 4. Stopped with a savepoint through the stop DAG; the trigger, rebuilt by the new
        # triggerer, sees the job end with exit 0; the run succeeds.
        stop_id = server.trigger(STOP, {"savepoint": True, "timeout_seconds": 300})
        assert server.wait_for_run(STOP, stop_id, 300) == "success", server.logs()
        stopped = server.xcom(STOP, stop_id, "stop")
        assert stopped["status"] == "stopped", stopped
        phase("stopped with a savepoint")
        assert server.wait_for_run(LAUNCH, run_id, 300) == "success", (
            server.logs() + Path(record.log).read_text(encoding="utf-8")[-3000:])
        ended = time.monotonic()
        phase("launch succeeded")
        assert server.task_instance(LAUNCH, run_id, "launch")["try_number"] == 1
        verdict = server.xcom(LAUNCH, run_id, "launch")
        assert verdict["outcome"] == "finished" and verdict["launch_id"] == record.launch_id
    finally:
        server.stop()

    assert read_exit(record) is not None and read_exit(record)["exit_code"] == 0
    assert len(list((tmp_path / "work" / "launches").glob("*.exit.json"))) == 1  # one launch
    fences = [key for key in (info.key for info in pipeline.objects.list("_lease/")) if "/fence-" in key]
    assert len(fences) == 1, fences  # one run lease: no second driver
    store = CheckpointStore.for_spec(load_spec(spec_path))
    savepoint = store.get(stopped["savepoint"])
    assert savepoint.kind is CheckpointKind.SAVEPOINT and stopped["savepoint"] == max(store.checkpoint_ids())
    assert min(savepoint.barrier_offsets["events"].values()) > 0, savepoint.barrier_offsets
    assert committed(tmp_path / "out") == through(savepoint.barrier_offsets["events"])
    print(json.dumps({
        "pipeline_without_airflow_seconds": round(up_at - stopping_at, 1),
        "airflow_down_seconds": round(up_at - down_at, 1),
        "checkpoints_completed_without_airflow": len(during),
        "pipeline_after_restart_seconds": round(ended - up_at, 1),
        "test_seconds": round(ended - started, 1),
        "records": sum(savepoint.barrier_offsets["events"].values()), "lost": 0, "duplicated": 0,
        "timeline_seconds": ", ".join(phases),
    }))
