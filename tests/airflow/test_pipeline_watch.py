"""The launch's watch: the detached launcher (a real process, no Spark) and the trigger's
decisions (finished, failed, stalled, still running) on a lease and a checkpoint store written
here, with a fake clock."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from barrierflow.airflow.supervision import PipelineWatchTrigger
from barrierflow.lease import fence_key, heartbeat_key
from barrierflow.ops.detached_launch import LaunchRecord, process_identity, read_exit, start_detached
from barrierflow.ops.pipeline_watch import Observation, decide, observe
from barrierflow.pipeline.model import open_pipeline

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory

STALL, LOST = 60.0, 90.0


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    return write_spec(tmp_path, spec_dict(tmp_path), "t.yaml")


def launch_record(tmp_path: Path, spec_path: Path, started: datetime, *, pid: int | None = None,
                  host: str | None = None) -> LaunchRecord:
    """A launch record as the launch task writes it; the launcher is this (live) test process
    unless ``pid`` names another."""
    folder = tmp_path / "work" / "launches"
    folder.mkdir(parents=True, exist_ok=True)
    pid = os.getpid() if pid is None else pid
    record = LaunchRecord("L1", str(spec_path), pid, host or socket.gethostname(), started.isoformat(),
                          str(folder / "L1.log"), str(folder / "L1.exit.json"), ["spark-submit"],
                          process_identity(pid), "t")
    record.path.write_text(json.dumps(record.as_dict()), encoding="utf-8")
    return record


def write_lease(spec_path: Path, started: datetime, heartbeat: datetime, *, pid: int | None = None) -> None:
    """The store's lease records of a run holder (fence 1) that last heartbeat at ``heartbeat``."""
    objects = open_pipeline(spec_path).objects
    record = {"format": "barrierflow-lease", "pipeline": "t", "fence": 1, "token": "tok",
              "pid": os.getpid() if pid is None else pid, "host": socket.gethostname(), "purpose": "run",
              "started_at": started.isoformat(), "ttl_seconds": 30.0}
    objects.put_bytes(fence_key(1), json.dumps(record).encode())
    objects.put_bytes(heartbeat_key(1), json.dumps({"fence": 1, "token": "tok", "at": heartbeat.isoformat()}).encode())


def write_exit(record: LaunchRecord, code: int, message: str, restarts: list[dict[str, Any]] | None = None) -> None:
    Path(record.exit_file).write_text(json.dumps({
        "exit_code": code, "message": message, "strategy": "fixed-delay: 3 attempts, 1 s apart",
        "restarts": restarts or [], "finished_at": "2026-01-01T00:00:00+00:00"}), encoding="utf-8")


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def checkpoint_time(tmp_path: Path, spec_path: Path) -> tuple[int, datetime]:
    """One completed checkpoint of pipeline ``t``: its id and completion time."""
    [manifest] = CheckpointFactory(tmp_path, ledger_sink=False).take(1)
    newest = open_pipeline(spec_path).newest_cut()
    assert newest is not None and newest.checkpoint_id == manifest.checkpoint_id
    return manifest.checkpoint_id, newest.completion_time


def verdict(record: LaunchRecord, now: datetime) -> Any:
    return decide(observe(record, now), stall_after=STALL, lost_after=LOST)


# -- decisions --------------------------------------------------------------------------------


def test_a_heartbeating_pipeline_that_checkpoints_is_running(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    cid, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at - timedelta(seconds=100))
    now = at + timedelta(seconds=STALL - 1)
    write_lease(spec_path, at - timedelta(seconds=90), now - timedelta(seconds=5))
    result = verdict(record, now)
    assert result.outcome == "running", result.message
    assert f"newest completed checkpoint {cid}" in result.message and "heartbeat is alive" in result.message


def test_a_heartbeating_pipeline_without_a_new_checkpoint_is_stalled_naming_the_checkpoint_and_its_age(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    cid, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at - timedelta(seconds=100))
    now = at + timedelta(seconds=STALL + 60)
    write_lease(spec_path, at - timedelta(seconds=90), now - timedelta(seconds=5))
    result = verdict(record, now)
    assert result.outcome == "stalled", result.message
    assert result.message.startswith("pipeline t stalled: ")
    assert f"newest completed checkpoint {cid} at {at.astimezone(UTC).isoformat()}, 120 s ago" in result.message
    assert "no checkpoint completed for 120 s (limit stall_after_seconds=60" in result.message
    assert "heartbeat is alive" in result.message and record.log in result.message


def test_the_stall_clock_starts_at_the_launch_not_at_an_older_checkpoint(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    _, at = checkpoint_time
    launched = at + timedelta(seconds=3600)  # an older run's checkpoint
    record = launch_record(tmp_path, spec_path, launched)
    write_lease(spec_path, launched, launched + timedelta(seconds=50))
    assert verdict(record, launched + timedelta(seconds=STALL - 1)).outcome == "running"
    stalled = verdict(record, launched + timedelta(seconds=STALL + 1))
    assert stalled.outcome == "stalled" and "no checkpoint completed in the 61 s since the launch" in stalled.message


def test_exit_zero_is_finished(tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    _, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at)
    write_exit(record, 0, "the job ended as asked")
    # Even long after the last checkpoint: the exit record decides.
    result = verdict(record, at + timedelta(hours=5))
    assert result.outcome == "finished" and "the job ended as asked (exit 0" in result.message


def test_a_failed_exit_names_the_exit_code_the_cause_the_log_and_the_restart_strategy(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    _, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at)
    restarts = [{"number": n, "cause": "killed", "delay": float(n)} for n in (1, 2, 3)]
    write_exit(record, 1, "pipeline t stopped after 4 attempt(s): sink unreachable", restarts)
    result = verdict(record, at + timedelta(seconds=1))
    assert result.outcome == "failed"
    assert "exit status 1: pipeline t stopped after 4 attempt(s): sink unreachable" in result.message
    assert "restart strategy fixed-delay: 3 attempts, 1 s apart: 3 restart(s) (delays 1.0 s, 2.0 s, 3.0 s)" \
        in result.message
    assert f"log {record.log}" in result.message


def test_a_launcher_gone_without_an_exit_record_is_failed_with_its_stale_heartbeat(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    cid, at = checkpoint_time
    gone = dead_pid()
    record = launch_record(tmp_path, spec_path, at - timedelta(seconds=10), pid=gone)
    now = at + timedelta(seconds=5)
    write_lease(spec_path, at - timedelta(seconds=8), now - timedelta(seconds=40), pid=gone)
    result = verdict(record, now)
    assert result.outcome == "failed"
    assert f"its launcher (pid {gone} on {socket.gethostname()}) is gone without recording an exit status" \
        in result.message
    assert "its lease holder is gone" in result.message and f"checkpoint {cid}" in result.message
    assert "recovery DAG" in result.message and record.log in result.message


def test_seen_from_another_host_a_stale_heartbeat_fails_only_after_lost_after(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    _, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at - timedelta(seconds=300), host="worker-elsewhere")
    last_beat = at
    write_lease(spec_path, at - timedelta(seconds=300), last_beat)
    # The heartbeat is stale (TTL 30 s) but the launcher may be between two restarts.
    waiting = verdict(record, last_beat + timedelta(seconds=LOST - 1))
    assert waiting.outcome == "running", waiting.message
    lost = verdict(record, last_beat + timedelta(seconds=LOST + 1))
    assert lost.outcome == "failed" and "no heartbeat for 91 s (limit 90 s)" in lost.message
    assert "worker-elsewhere" in lost.message


def test_a_starting_pipeline_without_lease_or_checkpoint_is_running_until_stall_after(
        tmp_path: Path, spec_path: Path) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    record = launch_record(tmp_path, spec_path, started)
    obs = observe(record, started + timedelta(seconds=10))
    assert obs.lease is None and obs.checkpoint_id is None and obs.launcher_alive is True
    assert decide(obs, stall_after=STALL, lost_after=LOST).outcome == "running"
    late = Observation(started + timedelta(seconds=STALL + 5), record, None, True, None, None, None)
    stalled = decide(late, stall_after=STALL, lost_after=LOST)
    assert stalled.outcome == "stalled" and "no completed checkpoint at all" in stalled.message


# -- the trigger ------------------------------------------------------------------------------


def test_the_trigger_fires_once_with_the_verdict_and_survives_serialization(
        tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))  # what the trigger sets in the triggerer, undone here
    cid, at = checkpoint_time
    record = launch_record(tmp_path, spec_path, at - timedelta(seconds=100))
    write_lease(spec_path, at - timedelta(seconds=90), at + timedelta(seconds=200))
    trigger = PipelineWatchTrigger(record_path=str(record.path), barrierflow_home=str(tmp_path),
                                   stall_after_seconds=STALL, lost_after_seconds=LOST, poll_seconds=0.01)
    classpath, kwargs = trigger.serialize()
    assert classpath == "barrierflow.airflow.supervision.PipelineWatchTrigger"
    rebuilt = PipelineWatchTrigger(**kwargs)
    clock = [at + timedelta(seconds=10)]
    monkeypatch.setattr(PipelineWatchTrigger, "now", staticmethod(lambda: clock[0]))
    assert rebuilt.check() is None  # running: no event
    clock[0] = at + timedelta(seconds=STALL + 30)
    event = asyncio.run(anext(rebuilt.run()))
    assert event.payload["outcome"] == "stalled" and event.payload["launch_id"] == "L1"
    assert f"checkpoint {cid}" in event.payload["message"] and event.payload["log"] == record.log


# -- the detached launcher (a real process) ---------------------------------------------------


def wait_for_exit(record: LaunchRecord, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (document := read_exit(record)) is None:
        assert time.monotonic() < deadline, Path(record.log).read_text(encoding="utf-8")
        time.sleep(0.05)
    return document


def test_the_launcher_runs_in_its_own_session_logs_and_records_the_exit(tmp_path: Path, spec_path: Path) -> None:
    code = "import os, sys; print('attempt', os.environ['BARRIERFLOW_SUPERVISED_BY'], os.getsid(0)); sys.exit(3)"
    record = start_detached(spec_path, [sys.executable, "-c", code], env=dict(os.environ))
    assert Path(record.log).parent == tmp_path / "work" / "launches"
    assert LaunchRecord.read(record.path) == record
    document = wait_for_exit(record)
    assert document["exit_code"] == 1 and document["strategy"].startswith("none")
    assert "the run (pid" in document["message"] and "exited 3" in document["message"]
    log = Path(record.log).read_text(encoding="utf-8")
    # The attempt ran under the launcher (pid in its env), in a session that is not this test's.
    attempt = next(line for line in log.splitlines() if line.startswith("attempt "))
    assert attempt.split()[1] == str(record.pid) and int(attempt.split()[2]) != os.getsid(0)
    assert "launcher pid" in log and "exit 1" in log
    assert decide(observe(record), stall_after=STALL, lost_after=LOST).outcome == "failed"


def test_a_launch_that_ends_as_asked_is_finished(tmp_path: Path, spec_path: Path) -> None:
    record = start_detached(spec_path, [sys.executable, "-c", "pass"], env=dict(os.environ))
    assert wait_for_exit(record)["exit_code"] == 0
    assert decide(observe(record), stall_after=STALL, lost_after=LOST).outcome == "finished"


def test_a_running_launcher_is_listed_as_live_until_it_recorded_its_exit(tmp_path: Path, spec_path: Path) -> None:
    from barrierflow.ops.detached_launch import live_launches

    started = datetime.now(UTC)
    record = launch_record(tmp_path, spec_path, started)  # this live process as the launcher
    assert [r.launch_id for r in live_launches(spec_path)] == ["L1"]
    write_exit(record, 0, "the job ended as asked")
    assert live_launches(spec_path) == []
    Path(record.exit_file).unlink()
    gone = launch_record(tmp_path, spec_path, started, pid=dead_pid())
    assert read_exit(gone) is None and live_launches(spec_path) == []


def flaky_command(marker: Path, failures: int) -> list[str]:
    """An attempt that fails (exit 1) ``failures`` times, then succeeds; counts in ``marker``."""
    code = (f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); n = int(p.read_text()) if p.exists() else 0; "
            f"p.write_text(str(n + 1)); print('error: attempt', n, 'failed', file=sys.stderr) if n < {failures} "
            f"else None; sys.exit(1 if n < {failures} else 0)")
    return [sys.executable, "-c", code]


def test_the_launcher_applies_the_spec_restart_strategy_between_attempts(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["restart"] = {"type": "fixed-delay", "attempts": 2, "delay": "0s"}
    spec = write_spec(tmp_path, data, "t.yaml")
    record = start_detached(spec, flaky_command(tmp_path / "n", failures=2), env=dict(os.environ))
    document = wait_for_exit(record)
    assert document["exit_code"] == 0, document
    assert [r["number"] for r in document["restarts"]] == [1, 2]
    assert "attempt 0 failed" in document["restarts"][0]["cause"]
    assert (tmp_path / "n").read_text() == "3"
    finished = decide(observe(record), stall_after=STALL, lost_after=LOST)
    assert finished.outcome == "finished" and "2 restart(s)" in finished.message


def test_past_the_strategy_limit_the_watch_fails_naming_the_strategy_and_its_restarts(tmp_path: Path) -> None:
    data = spec_dict(tmp_path)
    data["restart"] = {"type": "fixed-delay", "attempts": 1, "delay": "0s"}
    spec = write_spec(tmp_path, data, "t.yaml")
    record = start_detached(spec, flaky_command(tmp_path / "n", failures=5), env=dict(os.environ))
    assert wait_for_exit(record)["exit_code"] == 1
    failed = decide(observe(record), stall_after=STALL, lost_after=LOST)
    assert failed.outcome == "failed"
    assert "exit status 1: pipeline t stopped after 2 attempt(s): attempt 1 failed" in failed.message
    assert "restart strategy fixed-delay: 1 attempts, 0 s apart: 1 restart(s) (delays 0.0 s)" in failed.message
    assert record.log in failed.message
