"""The path a user takes after a crash, through a real Airflow: scheduler, DAG processor,
triggerer and API server on 127.0.0.1 (temporary home, SQLite, LocalExecutor), driven only
through the REST API.

1. The launch DAG of a two-stage pipeline (generator -> stage a -> channel on the test Kafka
   broker -> stage b -> Parquet through 2PC; one spark-submit on the spec's master runs the
   coordinator and both stages: there is no Spark connection) is triggered.
2. Once two global checkpoints completed, the job's driver (the lease names it) is SIGKILLed.
   The launch task fails and is not retried (the recovery DAG owns restarts). The checkpoints
   asset's watcher announces a completed global checkpoint, and the verification DAG runs on it.
3. The recovery DAG is triggered with ``{"checkpoint": "latest-valid", "restart": true}``: it
   restores every stage from one global checkpoint as a new attempt, restarts the job through
   the launch DAG and waits for the first global checkpoint of the new attempt.
4. The restarted job runs to the end of the source: every source record is in the committed
   output exactly once.
5. The upgrade DAG of a single-stage pipeline (keyed windows, RocksDB state; run to its end in
   the test process first), triggered with more shuffle partitions and ``dry_run`` false: its
   report says "needs rewrite" and the approval waits for a person (Airflow's
   human-in-the-loop); rejected through the REST API, the run ends with the upgrade skipped and
   the checkpoint store unchanged. Then a savepoint of the stopped pipeline, the same trigger,
   approved: the upgrade rescales the state (Spark's offline repartition) from 2 to 4
   partitions into a new savepoint.

A pipeline of one stage takes the same launch and recovery DAGs (one driver, one run loop);
every DAG kind of a single-stage pipeline runs by ``dag.test()`` in tests/dags/test_dag_runs.py.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.ops.checkpoints import list_checkpoints
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.dags.conftest import DAGS_FOLDER
from tests.drivers import short_lived_driver_java_options
from tests.scenarios.harness import windowed_spec
from tests.support.airflow_server import COMPONENTS, AirflowServer
from tests.support.in_session_runs import run_spec, write_spec
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(1200), pytest.mark.slow(240)]

#: The single-stage pipeline the upgrade DAG changes: records per source partition.
RECORDS = 600
#: The launched pipeline: records per source partition, throttled so that the first run is
#: still going when its second global checkpoint completes (the test kills it then).
STAGED_RECORDS = 600
LAUNCH, RECOVER, VERIFY = "barrierflow_pipeline__two", "barrierflow_recover__two", "barrierflow_verify__two"
UPGRADE = "barrierflow_upgrade__e2e"


def _approval_parked(scheduler_log: Path, run_id: str) -> bool:
    """Whether the scheduler logged the end of the approval task's asking run of ``run_id``."""
    return any("task_id=approve" in line and run_id in line and "state=awaiting_input" in line
               and "TaskInstance Finished" in line
               for line in scheduler_log.read_text(encoding="utf-8", errors="replace").splitlines())


def _files(root: Path) -> dict[str, str]:
    """Every checkpoint file under the store ``root`` with its content's digest (the reports the
    verification DAG writes there left out)."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and "reports" not in p.relative_to(root).parts}


def staged_spec(tmp: Path, endpoint: KafkaEndpoint, pipelines: Path) -> tuple[Path, Path]:
    """The two-stage pipeline's spec in ``pipelines`` (name ``two``) and its output folder."""
    tmp.mkdir()
    data = two_stage_spec(tmp, endpoint)
    data["stages"][0]["sources"][0].update({"records_per_partition": STAGED_RECORDS, "rows_per_second": 100})
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2}
    # The test reads the run's history at its end (the recovery's first checkpoint among them):
    # `run` applies checkpoint.retained as cuts complete, so it keeps them all here.
    data.setdefault("checkpoint", {})["retained"] = 1000
    path = pipelines / "two.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, tmp / "out"


def staged_output(out: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{out}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True))


def test_recovery_triggered_through_the_rest_api_restores_and_restarts_exactly_once(
    spark: Any, tmp_path: Path, kafka_endpoint: KafkaEndpoint
) -> None:
    started = time.monotonic()
    phases: list[tuple[str, float]] = []

    def phase(name: str) -> None:
        phases.append((name, time.monotonic() - started))

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    sink = {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}
    data = yaml.safe_load(windowed_spec(tmp_path, sink, records=RECORDS).read_text(encoding="utf-8"))
    data["name"] = "e2e"
    data["spark"]["state_store"] = "rocksdb"  # what Spark's offline repartition (the upgrade) rewrites
    spec_path = write_spec(pipelines / "e2e.yaml", data)
    store = CheckpointStore.for_spec(load_spec(spec_path))
    assert run_spec(spark, spec_path, until_exhausted=True, duration=300).completed
    phase("single-stage pipeline run to its end in the test process")
    staged_path, staged_out = staged_spec(tmp_path / "two", kafka_endpoint, pipelines)
    lease = tmp_path / "two" / "work" / "job.lease"

    server = AirflowServer(tmp_path / "airflow-home", DAGS_FOLDER, components=(*COMPONENTS, "triggerer"), env={
        "BARRIERFLOW_PIPELINES_DIR": str(pipelines),
        "BARRIERFLOW_RECOVERY_POKE_SECONDS": "2",
        "BARRIERFLOW_ASSET_POLL_SECONDS": "1",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", ""),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "_JAVA_OPTIONS": short_lived_driver_java_options(),  # the spark-submit drivers start faster
    })
    with server:
        server.wait_for(lambda: server.api("GET", f"/dags/{RECOVER}").status_code == 200, 120,
                        "the pipeline's DAGs to be parsed")
        for driven in (LAUNCH, RECOVER, VERIFY, UPGRADE):
            assert server.api("PATCH", f"/dags/{driven}", json={"is_paused": False}).status_code == 200
        phase("airflow up, DAGs parsed")
        assert server.api("GET", "/connections/spark_default").status_code == 404  # a fresh install

        # 1. Launched through the REST API; 2. killed after two global checkpoints.
        first = server.trigger(LAUNCH)
        server.wait_for(lambda: len(list_checkpoints(staged_path).cuts) >= 2, 300,
                        "two completed global checkpoints of the pipeline")
        os.kill(int(yaml.safe_load(lease.read_text(encoding="utf-8"))["pid"]), signal.SIGKILL)
        before = {m.checkpoint_id for m in list_checkpoints(staged_path).cuts}
        assert len(staged_output(staged_out)) < PARTITIONS * STAGED_RECORDS, "the pipeline ended before the kill"
        assert server.wait_for_run(LAUNCH, first, 120) == "failed"
        killed = server.task_instance(LAUNCH, first, "launch")
        assert killed["state"] == "failed" and killed["try_number"] == 1  # not up_for_retry: never retried
        phase("launched, 2 global checkpoints, driver killed, launch failed")

        # A completed checkpoint runs the verification DAG through the checkpoints asset.
        def asset_run() -> dict[str, Any] | None:
            return next((r for r in server.runs(VERIFY) if r["run_type"] == "asset_triggered"), None)

        by_asset = server.wait_for(asset_run, 120, "an asset-triggered run of the verification DAG")
        assert server.wait_for_run(VERIFY, by_asset["dag_run_id"], 120) == "success", server.logs()
        events = server.api("GET", f"/dags/{VERIFY}/dagRuns/{by_asset['dag_run_id']}/upstreamAssetEvents").json()
        announced = {e["extra"]["payload"]["id"] for e in events["asset_events"]}
        assert events["asset_events"][0]["uri"].endswith(str(tmp_path / "two" / "chk"))
        assert announced and announced <= before
        phase("verification ran on the checkpoint asset")

        # 3. Recovered through the REST API.
        recovery = server.trigger(RECOVER, {"checkpoint": "latest-valid", "restart": True, "wait_seconds": 400})
        assert server.wait_for_run(RECOVER, recovery, 600) == "success", server.logs()
        phase("recovery succeeded")
        report = server.xcom(RECOVER, recovery, "report")
        assert report["attempt"] == 1 and report["restarted"] is True, report
        assert report["checkpoint_id"] in before and report["first_checkpoint_id"] not in before, report

        # The killed launch task stayed failed: the only restart is the recovery's own launch run.
        assert server.task_instance(LAUNCH, first, "launch")["try_number"] == 1
        restarts = [r for r in server.runs(LAUNCH) if r["dag_run_id"] != first]
        assert len(restarts) == 1 and restarts[0]["conf"]["recovery_run_id"] == recovery

        # 4. The restarted pipeline runs to the end of its bounded source.
        assert server.wait_for_run(LAUNCH, restarts[0]["dag_run_id"], 600) == "success", server.logs()
        phase("restarted pipeline ran to the end")

        # 5. Changing the single-stage pipeline (more shuffle partitions) through the upgrade DAG:
        # the report asks a person, who rejects it through the REST API; nothing runs or changes.
        rescaled = tmp_path / "rescaled.yaml"
        rescaled.write_text(yaml.safe_dump({**data, "spark": {**data["spark"], "shuffle_partitions": 4}}),
                            encoding="utf-8")
        stored = _files(tmp_path / "checkpoints")
        rejected = server.trigger(UPGRADE, {"new_spec": str(rescaled), "dry_run": False})
        server.wait_for(lambda: server.task_instance(UPGRADE, rejected, "approve")["state"] == "awaiting_input", 300,
                        "the upgrade's approval to be asked")
        # A person answers after the scheduler has seen the asking process end: an answer within
        # that moment (about 1 s) resumes the task while its first run's end is still being
        # processed, which Airflow 3.3 takes for a failed try.
        server.wait_for(lambda: _approval_parked(server.home / "scheduler.log", rejected), 60,
                        "the scheduler to see the approval task parked")
        asked = server.xcom(UPGRADE, rejected, "report")
        assert asked["verdict"] == "needs rewrite" and "shuffle partitions" in asked["markdown"], asked
        answer = server.api("PATCH", f"/dags/{UPGRADE}/dagRuns/{rejected}/taskInstances/approve/-1/hitlDetails",
                            json={"chosen_options": ["Reject"]})
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(UPGRADE, rejected, 120) == "success", server.logs()
        assert server.task_instance(UPGRADE, rejected, "upgrade")["state"] == "skipped"
        assert _files(tmp_path / "checkpoints") == stored
        phase("upgrade: report, approval rejected, nothing changed")

        # ... then, over a savepoint of the stopped pipeline, approved: the state is rescaled into a
        # new savepoint that the changed spec restores as a new attempt.
        assert main(["savepoint", str(spec_path)]) == 0
        source = max(m.checkpoint_id for m in store.completed())
        approved = server.trigger(UPGRADE, {"new_spec": str(rescaled), "dry_run": False, "canary_checkpoints": 1})
        server.wait_for(lambda: server.task_instance(UPGRADE, approved, "approve")["state"] == "awaiting_input", 300,
                        "the second upgrade's approval to be asked")
        server.wait_for(lambda: _approval_parked(server.home / "scheduler.log", approved), 60,
                        "the scheduler to see the approval task parked")
        answer = server.api("PATCH", f"/dags/{UPGRADE}/dagRuns/{approved}/taskInstances/approve/-1/hitlDetails",
                            json={"chosen_options": ["Approve"]})
        assert answer.status_code == 200, answer.text
        assert server.wait_for_run(UPGRADE, approved, 300) == "success", server.logs()
        upgraded = server.xcom(UPGRADE, approved, "upgrade")
        assert upgraded["source_savepoint"] == source and upgraded["savepoint"] > source, upgraded
        assert upgraded["rescaled"] == {"e2e": {"from": 2, "to": 4}}, upgraded
        assert upgraded["canary"]["checkpoints"] == 1 and len(upgraded["canary"]["verified"]) == 1, upgraded
        phase("upgrade: approved, rescaled 2 -> 4")
    print("REST recovery timeline (s): " + ", ".join(f"{name} {t:.1f}" for name, t in phases))

    assert staged_output(staged_out) == [(p, o) for p in range(PARTITIONS) for o in range(STAGED_RECORDS)]
    after = list_checkpoints(staged_path).cuts
    assert report["first_checkpoint_id"] in {m.checkpoint_id for m in after}
    assert after[-1].attempt >= 1, "the restarted pipeline wrote no global checkpoint of a new attempt"
