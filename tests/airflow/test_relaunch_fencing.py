"""The relaunch after a lost launch host, without Spark: the restart ledger (one budget across
processes), and fencing: while the old lease is live (a partitioned host whose driver keeps
heartbeating), the watch keeps waiting, the relaunch decision counts nothing and the launch task
starts no second driver; once the lease is gone, the loss is reported and counted.

The live lease is held by a real :class:`~barrierflow.lease.JobLease` in a child process (its
heartbeat thread running), or written as another host's lease with a fresh heartbeat."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from barrierflow.airflow.launch import PipelineSubmitOperator
from barrierflow.airflow.supervision import PipelineWatchTrigger
from barrierflow.lease import JobAlreadyRunningError, fence_key, heartbeat_key, lease_state
from barrierflow.ops.detached_launch import LaunchRecord, process_identity
from barrierflow.ops.pipeline_watch import decide, observe
from barrierflow.ops.relaunch import decide_relaunch
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.restart_ledger import LedgerStrategy, RestartLedger
from barrierflow.spec.loader import load_any_spec

from tests.pipeline_specs import spec_dict, write_spec

RESTART = {"type": "exponential-delay", "initial_backoff": "1s", "backoff_multiplier": 2, "max_backoff": "4s",
           "jitter_factor": 0, "reset_backoff_threshold": "1h", "attempts_before_reset_backoff": 3}


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    return write_spec(tmp_path, {**spec_dict(tmp_path), "restart": RESTART}, "t.yaml")


def lost_launch(tmp_path: Path, spec_path: Path, *, host: str | None = None) -> LaunchRecord:
    """The record of a launch whose launcher is gone without an exit record (a pid that exited)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    folder = tmp_path / "work" / "launches"
    folder.mkdir(parents=True, exist_ok=True)
    started = (datetime.now(UTC) - timedelta(seconds=600)).isoformat()
    record = LaunchRecord("L1", str(spec_path), process.pid, host or socket.gethostname(), started,
                          str(folder / "L1.log"), str(folder / "L1.exit.json"), ["spark-submit"],
                          process_identity(os.getpid()), "t")
    record.path.write_text(json.dumps(record.as_dict()), encoding="utf-8")
    return record


def new_launches(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "work" / "launches").glob("*.json")
                  if p.name not in ("L1.json", "L1.restarts.json"))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_ledger_keeps_one_budget_for_the_launcher_and_the_relaunches_and_counts_a_loss_once(
        tmp_path: Path, spec_path: Path) -> None:
    restart = load_any_spec(spec_path).restart
    assert restart is not None
    clock = Clock()
    ledger = RestartLedger(tmp_path / "chain.restarts.json", restart, clock=clock)
    launcher = LedgerStrategy(RestartLedger(ledger.path, restart, clock=clock))  # another process, same file
    assert launcher.next_delay(0.0) == 1.0  # a driver restart on its host
    clock.now += 10
    assert ledger.decide("host lost", key="L1").delay == 2.0  # a relaunch: the same budget, the next delay
    assert ledger.decide("host lost", key="L1").delay == 2.0  # the same loss decided again: counted once
    clock.now += 10
    assert ledger.decide("host lost again", key="L2").delay == 4.0
    clock.now += 10
    refused = ledger.decide("host lost a third time", key="L3")
    assert refused.delay is None and refused.strategy.describe().startswith("exponential-delay")
    assert [f["delay"] for f in ledger.failures()] == [1.0, 2.0, 4.0, None]
    assert refused.causes().startswith("1. a failed attempt restarted by the launcher") and "4. host lost a third" \
        in refused.causes()


def test_a_relaunch_while_the_old_lease_heartbeats_never_starts_a_second_driver(
        tmp_path: Path, spec_path: Path) -> None:
    record = lost_launch(tmp_path, spec_path)
    pipeline = open_pipeline(spec_path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from barrierflow.lease import JobLease
        from barrierflow.pipeline.model import open_pipeline
        pipeline = open_pipeline({str(spec_path)!r})
        lease = JobLease(Path(pipeline.work_dir), "t", store=pipeline.objects, ttl=1.5)
        lease.acquire()
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        trigger = PipelineWatchTrigger(record_path=str(record.path), barrierflow_home=str(tmp_path),
                                       stall_after_seconds=3600, lost_after_seconds=1, relaunch=True)
        # Several looks over more than one TTL: the heartbeat keeps the lease live, so no event.
        for _ in range(4):
            assert trigger.check() is None
            time.sleep(0.6)  # time passes (more than the TTL in all): not a wait for readiness
        waiting = decide(observe(record), stall_after=3600, lost_after=1, relaunch=True)
        assert waiting.outcome == "running" and "not relaunching while its lease is live" in waiting.message
        with pytest.raises(JobAlreadyRunningError, match="not relaunching while the old driver may still run"):
            decide_relaunch(record.path, "lost")
        assert not record.ledger_path.exists()  # nothing counted
        operator = PipelineSubmitOperator(task_id="launch", spec_path=str(spec_path), spec_master="local[1]",
                                          recovery_dag_id="barrierflow_recover__t", application="run.py")
        with pytest.raises(TaskDeferred) as deferred:  # the task goes back to watching
            operator._after_loss({"params": {}}, {"outcome": "lost", "record_path": str(record.path)})
        assert isinstance(deferred.value.trigger, PipelineWatchTrigger)
        assert deferred.value.trigger.record_path == str(record.path)
        assert new_launches(tmp_path) == []  # no second launcher, so no second driver
        assert lease_state(pipeline.objects)["pid"] == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The old driver is gone (its process on this host): the loss is reported and counted once.
    event = trigger.check()
    assert event is not None and event["outcome"] == "lost" and event["record_path"] == str(record.path), event
    decision = decide_relaunch(record.path, event["message"])
    assert decision.delay == 1.0 and decision.number == 1 and decision.limit == "3"
    assert "relaunch 1 of 3 after 1.0 s (strategy exponential-delay" in decision.message


def test_a_partitioned_host_whose_lease_heartbeats_is_not_relaunched_until_the_heartbeat_stops(
        tmp_path: Path, spec_path: Path) -> None:
    record = lost_launch(tmp_path, spec_path, host="lost-host")
    objects = open_pipeline(spec_path).objects
    now = datetime.now(UTC)
    objects.put_bytes(fence_key(1), json.dumps({
        "format": "barrierflow-lease", "pipeline": "t", "fence": 1, "token": "tok", "pid": 4242, "host": "lost-host",
        "purpose": "run", "started_at": (now - timedelta(seconds=600)).isoformat(), "ttl_seconds": 6.0}).encode())

    def beat(at: datetime) -> None:
        objects.put_bytes(heartbeat_key(1), json.dumps({"fence": 1, "token": "tok", "at": at.isoformat()}).encode())

    beat(now)
    alive = decide(observe(record, now + timedelta(seconds=2)), stall_after=3600, lost_after=1, relaunch=True)
    assert alive.outcome == "running", alive.message
    with pytest.raises(JobAlreadyRunningError):
        decide_relaunch(record.path, "lost", now=now + timedelta(seconds=2))
    later = now + timedelta(seconds=7)  # the heartbeat older than the lease's TTL: the host is lost
    lost = decide(observe(record, later), stall_after=3600, lost_after=1, relaunch=True)
    assert lost.outcome == "lost" and "another host" in lost.message, lost.message
    assert decide_relaunch(record.path, lost.message, now=later).delay == 1.0
    # Without a restart: block the same loss fails the task, as before.
    assert decide(observe(record, later), stall_after=3600, lost_after=1).outcome == "failed"


def test_a_launch_that_relaunches_refuses_an_executor_of_several_hosts_without_a_shared_work_dir() -> None:
    from barrierflow.airflow.launch import relaunch_layout_problem

    assert relaunch_layout_problem("LocalExecutor", "/w", None) is None
    assert relaunch_layout_problem("airflow.executors.local_executor.LocalExecutor", "/w", None) is None
    assert relaunch_layout_problem("CeleryExecutor", "/w", "true") is None
    problem = relaunch_layout_problem("LocalExecutor,CeleryExecutor", "/srv/work", None)
    assert problem is not None and "BARRIERFLOW_SHARED_WORK_DIR=true" in problem and "/srv/work" in problem
