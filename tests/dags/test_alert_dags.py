"""Alerts from the pipeline's DAGs, run the way Airflow runs them (``dag.test()``): a spec with an
``alerts`` block gets the notifier on every task, and a task that fails for good POSTs the alert
to a real webhook on 127.0.0.1: ``checkpoint_age`` from the supervision check, ``verification``
from the verify DAG, ``task_failure`` from the recovery DAG; the URL comes from an environment
variable or an Airflow connection and appears in no task log."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags.conftest import parse_dags, run_dag
from tests.dags.test_dag_runs import flip_newest
from tests.pipeline_specs import spec_dict, write_spec
from tests.support.webhook_receiver import WebhookReceiver
from tests.verification.checkpoint_factory import CheckpointFactory

pytestmark = pytest.mark.usefixtures("airflow_db")

URL_ENV = "BARRIERFLOW_TEST_ALERT_URL"
CONN_ID = "barrierflow_test_alerts"


def alerting_spec(tmp_path: Path, pipelines_dir: Path, destination: dict[str, Any]) -> Path:
    data = spec_dict(tmp_path)
    data["checkpoint"]["retained"] = 2
    data["alerts"] = {"timeout": "5s", "destinations": [destination]}
    return write_spec(pipelines_dir, data, "t.yaml")


def test_every_task_of_an_alerting_pipeline_gets_the_notifier_and_others_none(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    from barrierflow.airflow.notifier import BarrierflowNotifier

    alerting_spec(tmp_path / "a", pipelines_dir, {"type": "webhook", "url_env": URL_ENV})
    write_spec(pipelines_dir, spec_dict(tmp_path / "q", name="quiet"), "quiet.yaml")
    bag = parse_dags(monkeypatch, pipelines_dir)
    assert bag.import_errors == {}

    alerting = [d for d in bag.dags.values() if d.dag_id.endswith("__t")]
    quiet = [d for d in bag.dags.values() if d.dag_id.endswith("__quiet")]
    assert {d.dag_id for d in alerting} >= {"barrierflow_pipeline__t", "barrierflow_supervise__t",
                                            "barrierflow_verify__t", "barrierflow_recover__t"}
    for dag in alerting:
        for task in dag.tasks:
            callbacks = task.on_failure_callback or []
            assert [type(c) for c in callbacks] == [BarrierflowNotifier], (dag.dag_id, task.task_id)
            assert callbacks[0].spec_path == str((pipelines_dir / "t.yaml").resolve())
    assert quiet and all(not task.on_failure_callback for dag in quiet for task in dag.tasks)


def test_the_supervise_dag_alerts_on_checkpoint_age(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path,
                                                    tmp_path: Path) -> None:
    alerting_spec(tmp_path, pipelines_dir, {"type": "webhook", "url_env": URL_ENV})
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        none_yet = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t")
        factory = CheckpointFactory(tmp_path)
        factory.coordinator.now = lambda: datetime.now(UTC) - timedelta(hours=2)  # completed two hours ago
        factory.take(1)
        stale = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t", max_checkpoint_age_seconds=600)
        first, second = (r.body for r in receiver.wait_for(2))

    assert none_yet.state == "failed" and stale.state == "failed"
    for alert, run in ((first, none_yet), (second, stale)):
        assert alert["kind"] == "checkpoint_age" and alert["pipeline"] == "t"
        assert (alert["dag_id"], alert["run_id"], alert["task_id"]) == ("barrierflow_supervise__t", run.run_id,
                                                                        "supervise")
        assert alert["runbook"] == "docs/operations.md#checkpoint-age-breach"
        assert datetime.fromisoformat(alert["time"]).tzinfo is not None
        assert receiver.url not in run.log
    assert "no completed checkpoint" in first["message"] and first["details"]["age_seconds"] is None
    assert "older than the limit of 600s" in second["message"]
    assert second["details"]["age_seconds"] > 3600 and second["details"]["max_age_seconds"] == 600


def test_the_verify_dag_alerts_on_a_corrupt_checkpoint(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path,
                                                       tmp_path: Path) -> None:
    alerting_spec(tmp_path, pipelines_dir, {"type": "webhook", "url_env": URL_ENV})
    factory = CheckpointFactory(tmp_path)
    factory.take(3)
    flip_newest(factory, 1)
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        run = run_dag(monkeypatch, pipelines_dir, "barrierflow_verify__t", latest=3)
        [request] = receiver.wait_for(1)

    assert run.state == "failed" and run.task_states["verify"] == "failed"
    alert = request.body
    assert alert["kind"] == "verification" and alert["task_id"] == "verify" and alert["run_id"] == run.run_id
    assert "(checkpoint 4)" in alert["message"] and "sha256 mismatch" in alert["message"]
    assert [f["checkpoint_id"] for f in alert["details"]["failures"]] == [4]
    assert "Do not restore the named checkpoint" in alert["action"]
    assert receiver.url not in run.log


def test_a_failed_recovery_task_alerts_through_an_airflow_connection(
    monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    alerting_spec(tmp_path, pipelines_dir, {"type": "webhook", "conn_id": CONN_ID, "events": ["task_failure"]})
    CheckpointFactory(tmp_path, ledger_sink=False).take(2)
    with WebhookReceiver() as receiver:
        base, token = receiver.url.rsplit("/S3CR3T", 1)
        # Slack's convention: the host is the base URL, the password the secret rest of the path.
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(
            {"conn_type": "http", "host": base, "password": "S3CR3T" + token}))
        run = run_dag(monkeypatch, pipelines_dir, "barrierflow_recover__t", checkpoint=9, restart=False)
        [request] = receiver.wait_for(1)

    assert run.state == "failed" and run.task_states["choose_checkpoint"] == "failed"
    assert request.path == receiver.path
    alert = request.body
    assert alert["kind"] == "task_failure" and alert["dag_id"] == "barrierflow_recover__t"
    assert alert["task_id"] == "choose_checkpoint" and "checkpoint 9 of pipeline t does not exist" in alert["message"]
    assert alert["runbook"].endswith("#job-failed") and "barrierflow_recover__t" in alert["action"]
    assert "S3CR3T" not in run.log


@pytest.mark.spark
@pytest.mark.slow(20)
def test_a_pipeline_whose_sink_blocks_raises_the_checkpoint_age_alert(
    spark: Any, monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path
) -> None:
    """A running pipeline whose sink stops answering (its pre-commit blocks from the second
    checkpoint on) completes no further checkpoint; the supervision check, run while it is
    stalled, fails and POSTs the ``checkpoint_age`` alert naming the pipeline."""
    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.runtime.job import StreamingJob
    from barrierflow.sinks.parquet import ParquetFileSink
    from barrierflow.spec import load_spec

    data = spec_dict(tmp_path)
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    data["alerts"] = {"timeout": "5s", "destinations": [{"type": "webhook", "url_env": URL_ENV}]}
    spec_path = write_spec(pipelines_dir, data, "t.yaml")
    limit = 1.0  # seconds: two checkpoint intervals
    blocked, release = threading.Event(), threading.Event()
    pre_commit = ParquetFileSink.pre_commit
    calls = []

    def blocking_pre_commit(self: ParquetFileSink, txn: Any) -> dict[str, Any]:
        calls.append(txn)
        if len(calls) >= 2 and not release.is_set():  # the sink stops answering
            blocked.set()
            release.wait(timeout=120)
        return pre_commit(self, txn)

    monkeypatch.setattr(ParquetFileSink, "pre_commit", blocking_pre_commit)
    store = CheckpointStore.for_spec(load_spec(spec_path))
    outcome: dict[str, Any] = {}

    def tick(job: StreamingJob) -> None:
        latest = store.latest()
        if outcome or not blocked.is_set() or latest is None or latest.completion_time is None:
            return
        if (datetime.now(UTC) - latest.completion_time).total_seconds() <= limit:
            return  # stalled, but not yet for longer than the limit
        outcome["run"] = run_dag(monkeypatch, pipelines_dir, "barrierflow_supervise__t",
                                 max_checkpoint_age_seconds=limit)
        outcome["stalled_at"] = latest.checkpoint_id
        release.set()

    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path)).run(
            duration=180, on_tick=tick, until=lambda job: bool(outcome))
        [request] = receiver.wait_for(1)

    assert outcome, "the sink never blocked or the checkpoint age never passed the limit"
    assert outcome["run"].state == "failed" and outcome["run"].task_states["supervise"] == "failed"
    alert = request.body
    assert alert["kind"] == "checkpoint_age" and alert["pipeline"] == "t"
    assert f"older than the limit of {limit:g}s" in alert["message"], alert["message"]
    assert alert["details"]["age_seconds"] > limit
