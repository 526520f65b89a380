"""A lost launch host, through a real Airflow: scheduler, DAG processor, API server and triggerer on
127.0.0.1 (temporary home, SQLite, LocalExecutor). No person and no REST call brings it back.

The pipeline (generator throttled by ``rows_per_second``, more records than it can read within
the test -> projection of each record's partition and offset -> Parquet through 2PC) has
``restart: exponential-delay`` (1 s, x2, up to 4 s, no jitter, at most 3 restarts before a reset
that does not come within the test). Its launch DAG is triggered once. Then, four times, at a
moment chosen by a seeded random source after the running launch completed a checkpoint covering
new records, the launch's host is lost (:func:`barrierflow.chaos.host_loss.lose_host`: the
launcher and its whole process tree frozen and SIGKILLed: no clean shutdown, no exit record, no
released lease); the third time Airflow's scheduler is SIGKILLed with it and started again once the triggerer has
handed the task back.

* Losses 1-3: the one launch task (first try) relaunches the pipeline by itself: its watch
  reports the launcher lost once the lease is not live, the task counts the loss in the launch
  chain's restart ledger, waits the strategy's delay (deferred), restores the latest valid
  checkpoint and starts a new launcher, then defers again. Each time one launcher runs, of the
  same chain, and a checkpoint covering more records than the last one before the loss
  completes (the pipeline is back and progressing); the time from the kill to that checkpoint
  is printed (a figure, not asserted).
* Loss 4, past the budget of 3: the task fails on its first try, naming the strategy and the
  causes; the ``restart`` alerts (3) and the ``gave_up`` alert arrived at a real webhook.
* Output: after the recovery runbook's restore of the latest valid checkpoint (done here, as the
  person now would), the committed output holds every record up to that checkpoint's source
  offsets exactly once (computed here from the offsets alone: what a failure-free run commits);
  one driver per launch (one run fence per launch record: never a second driver).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
import yaml
from barrierflow.chaos.host_loss import lose_host, running_launch
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.detached_launch import LaunchRecord
from barrierflow.ops.restore import restore
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spec import load_spec

from tests.dags.conftest import DAGS_FOLDER
from tests.dags.test_airflow_restart_outlived import committed, through
from tests.drivers import short_lived_driver_java_options
from tests.support.airflow_server import COMPONENTS, AirflowServer
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1500), pytest.mark.slow(400)]

LAUNCH = "barrierflow_pipeline__hostloss"
PARTITIONS, RECORDS, RATE = 2, 10_000, 10.0
SEED = 11
BUDGET = 3
ALERT_URL_ENV = "BARRIERFLOW_HOSTLOSS_ALERT_URL"


def write_spec(tmp_path: Path, pipelines: Path) -> Path:
    data = {
        "version": 1,
        "name": "hostloss",
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
        "restart": {"type": "exponential-delay", "initial_backoff": "1s", "backoff_multiplier": 2,
                    "max_backoff": "4s", "jitter_factor": 0, "reset_backoff_threshold": "1h",
                    "attempts_before_reset_backoff": BUDGET},
        "alerts": {"destinations": [{"type": "webhook", "url_env": ALERT_URL_ENV, "events": ["restart", "gave_up"]}]},
    }
    path = pipelines / "hostloss.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def launches(work: Path) -> list[LaunchRecord]:
    folder = work / "launches"
    return sorted((LaunchRecord.read(p) for p in folder.glob("*.json")
                   if not p.name.endswith((".exit.json", ".restarts.json"))), key=lambda r: r.started_at)


def state(server: AirflowServer, run_id: str) -> str | None:
    """The launch task's state, or None when the (loaded) API server did not answer in time."""
    import requests

    try:
        return str(server.task_instance(LAUNCH, run_id, "launch")["state"])
    except (requests.Timeout, requests.ConnectionError):
        return None


def task_logs(home: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace")
                     for p in sorted((home / "logs").rglob("*")) if p.is_file() and LAUNCH in str(p))


def test_airflow_relaunches_a_pipeline_after_lost_hosts_by_its_restart_strategy(tmp_path: Path) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    spec_path = write_spec(tmp_path, pipelines)
    pipeline = open_pipeline(spec_path)
    work = tmp_path / "work"

    store = CheckpointStore.for_spec(load_spec(spec_path))

    def progress() -> int:
        """Records covered by the newest completed checkpoint (0 before one covers any)."""
        ids = list(pipeline.cuts.completed_ids())
        return sum(store.get(max(ids)).barrier_offsets["events"].values()) if ids else 0

    recoveries: list[float] = []
    with WebhookReceiver() as hook:
        server = AirflowServer(tmp_path / "airflow-home", DAGS_FOLDER, components=(*COMPONENTS, "triggerer"), env={
            "BARRIERFLOW_PIPELINES_DIR": str(pipelines),
            "BARRIERFLOW_LAUNCH_WATCH_SECONDS": "1",
            "BARRIERFLOW_ASSET_POLL_SECONDS": "30",
            "BARRIERFLOW_LEASE_TTL_SECONDS": "6",
            ALERT_URL_ENV: hook.url,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", ""),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # A loaded machine answers the task runner's Execution API calls late, not never.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "_JAVA_OPTIONS": short_lived_driver_java_options(),
        })
        try:
            server.start()
            server.wait_for(lambda: server.api("GET", f"/dags/{LAUNCH}").status_code == 200, 120,
                            "the pipeline's DAGs to be parsed")
            assert server.api("PATCH", f"/dags/{LAUNCH}", json={"is_paused": False}).status_code == 200
            run_id = server.trigger(LAUNCH)
            server.wait_for(lambda: state(server, run_id) == "deferred", 300, "the launch task to defer")
            server.wait_for(progress, 600, "a completed checkpoint covering records of the launched pipeline")
            [first] = launches(work)

            for loss in range(1, BUDGET + 2):
                current = running_launch(work)
                assert current is not None and current.chain_id == first.launch_id, launches(work)
                time.sleep(rng.uniform(0.0, 3.0))  # the random moment of the loss (seeded)
                with_scheduler = loss == BUDGET
                if with_scheduler:
                    server.kill_component("scheduler")
                lost = lose_host(current)
                lost_at = time.monotonic()
                # read once the lost launch's tree is dead: a checkpoint it completed just before
                # the loss must not count as the relaunched pipeline's progress
                before = progress()
                if with_scheduler:  # the triggerer alone sees the loss and hands the task back
                    deadline = time.monotonic() + 120
                    while state(server, run_id) in ("deferred", None):
                        assert time.monotonic() < deadline, "the triggerer did not report the lost launcher"
                        time.sleep(0.5)
                    server.start_component("scheduler")
                if loss > BUDGET:
                    break

                def relaunched(lost: LaunchRecord = lost.launch, before: int = before) -> bool:
                    now = running_launch(work)
                    return now is not None and now.launch_id != lost.launch_id and progress() > before
                server.wait_for(relaunched, 600, f"the pipeline back after host loss {loss}")
                recoveries.append(round(time.monotonic() - lost_at, 1))
                again = running_launch(work)
                assert again is not None and again.chain_id == first.launch_id
                assert server.task_instance(LAUNCH, run_id, "launch")["try_number"] == 1

            assert server.wait_for_run(LAUNCH, run_id, 300) == "failed", server.logs()
            launch = server.task_instance(LAUNCH, run_id, "launch")
            assert launch["state"] == "failed" and launch["try_number"] == 1, launch
            failed_at = time.monotonic()
            alerts = hook.wait_for(BUDGET + 1, timeout=60)
        finally:
            server.stop()
            while (left := running_launch(work)) is not None:  # a failed test leaves no pipeline running
                lose_host(left)

    logs = task_logs(tmp_path / "airflow-home")
    assert "allows no further restart" in logs and "exponential-delay" in logs, logs[-5000:]
    assert "Causes: 1. " in logs and "4. " in logs, logs[-5000:]
    ledger = json.loads(first.ledger_path.read_text(encoding="utf-8"))
    assert [(f["by"], f["delay"]) for f in ledger["failures"]] == [
        ("relaunch", 1.0), ("relaunch", 2.0), ("relaunch", 4.0), ("relaunch", None)], ledger
    assert sorted(a.body["kind"] for a in alerts) == ["gave_up"] + ["restart"] * BUDGET, [a.body for a in alerts]
    records = launches(work)
    assert len(records) == BUDGET + 1 and {r.chain_id for r in records} == {first.launch_id}, records
    assert all(r.host == first.host for r in records)
    run_fences = [json.loads(pipeline.objects.get_bytes(info.key)) for info in pipeline.objects.list("_lease/")
                  if "/fence-" in info.key]
    assert len([f for f in run_fences if f.get("purpose") == "run"]) == len(records), run_fences  # one driver each

    # The runbook's restore (latest valid checkpoint, in-doubt transactions decided), then the output.
    outcome = restore(spec_path, "latest-valid")
    offsets = store.get(outcome.checkpoint_id).barrier_offsets["events"]
    assert min(offsets.values()) > 0, offsets
    assert committed(tmp_path / "out") == through(offsets)
    print(json.dumps({
        "recovery_seconds_kill_to_checkpoint_with_new_records": recoveries,
        "lease_ttl_seconds": 6, "delays_seconds": [1.0, 2.0, 4.0],
        "records": sum(offsets.values()), "lost": 0, "duplicated": 0,
        "test_seconds": round(failed_at - started, 1),
    }))
