"""The restart supervisor's alerts, wired from a spec's ``alerts`` block as ``barrierflow run``
wires them (:func:`barrierflow.ops.supervised_run.restart_alert_observers`), around the stand-in runs of
the supervisor's own tests (no Spark): a ``restart`` alert before each restart, a ``gave_up``
alert when the strategy allows no more, and an endpoint that is down changes nothing else."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from barrierflow.ops.supervised_run import restart_alert_observers
from barrierflow.runtime.restart_strategy import FixedDelay
from barrierflow.runtime.restart_supervisor import RestartsExhaustedError, SupervisedRun, supervise

from tests.pipeline_specs import make_spec, spec_dict, write_spec
from tests.runtime.test_restart_supervisor import SCRIPT
from tests.support.webhook_receiver import WebhookReceiver, closed_port_url

URL_ENV = "BARRIERFLOW_TEST_ALERT_URL"


def _supervise(tmp_path: Path, plan: str, strategy: FixedDelay) -> tuple[SupervisedRun | Exception, list[float]]:
    spec = make_spec(tmp_path, name="orders", alerts={
        "timeout": "2s", "destinations": [{"type": "webhook", "url_env": URL_ENV}]})
    slept: list[float] = []
    command = [sys.executable, "-c", SCRIPT, str(tmp_path / "attempts"), plan]
    observers: dict[str, Any] = restart_alert_observers(spec)
    try:
        return supervise(command, strategy, lease_free=lambda: True, name="orders", sleep=slept.append,
                         stderr=io.StringIO(), **observers), slept
    except Exception as exc:  # returned for the test to inspect
        return exc, slept


def test_a_restart_and_the_strategy_giving_up_each_send_an_alert(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        outcome, slept = _supervise(tmp_path, "fail", FixedDelay(1, 3.0))
        restart, gave_up = (r.body for r in receiver.wait_for(2))

    assert isinstance(outcome, RestartsExhaustedError)
    assert restart["kind"] == "restart" and restart["severity"] == "warning" and restart["pipeline"] == "orders"
    assert "restarted in 3.0 s (restart 1 of 1, strategy fixed-delay" in restart["message"]
    assert "sink out of disk space (attempt 0)" in restart["message"]
    assert restart["details"]["delay_seconds"] == 3.0 and restart["details"]["restart"] == 1
    assert restart["runbook"] == "docs/operations.md#restart" and restart["dag_id"] is None
    assert gave_up["kind"] == "gave_up" and gave_up["message"] == str(outcome)
    assert "sink out of disk space (attempt 1)" in gave_up["message"]
    assert gave_up["details"]["attempts"] == 2 and gave_up["details"]["delays_seconds"] == [3.0]
    assert len(slept) == 1 and 0.0 <= slept[0] <= 3.0  # the alert's time is taken from the delay


def test_an_endpoint_that_is_down_does_not_stop_the_restart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(URL_ENV, closed_port_url())
    outcome, _ = _supervise(tmp_path, "kill,ok", FixedDelay(1, 0.0))
    assert isinstance(outcome, SupervisedRun) and outcome.attempts == 2, outcome
    assert int((tmp_path / "attempts").read_text()) == 2


def test_an_observer_that_raises_is_logged_and_ignored(tmp_path: Path) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("observer bug")

    command = [sys.executable, "-c", SCRIPT, str(tmp_path / "attempts"), "kill,ok"]
    run = supervise(command, FixedDelay(1, 2.0), lease_free=lambda: True, name="orders", sleep=lambda s: None,
                    stderr=io.StringIO(), on_restart=broken, on_give_up=broken)
    assert run.attempts == 2 and [r.delay for r in run.restarts] == [2.0]


def test_barrierflow_run_under_its_strategy_sends_the_alerts_of_its_spec(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    from barrierflow.ops import supervised_run

    data = spec_dict(tmp_path, name="orders")
    data["restart"] = {"type": "fixed-delay", "attempts": 1, "delay": "0s"}
    data["alerts"] = {"destinations": [{"type": "webhook", "url_env": URL_ENV, "events": ["restart"]}]}
    stand_in = [sys.executable, "-c", SCRIPT, str(tmp_path / "attempts"), "kill,ok"]
    monkeypatch.setattr(supervised_run, "_command", lambda *args, **kwargs: stand_in)  # no Spark: the stand-in run
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        outcome = supervised_run.run_supervised(write_spec(tmp_path, data))
        [request] = receiver.wait_for(1)

    assert outcome is not None and outcome.attempts == 2
    assert request.body["kind"] == "restart" and request.body["pipeline"] == "orders"
    assert "was killed by SIGKILL" in request.body["details"]["cause"]
