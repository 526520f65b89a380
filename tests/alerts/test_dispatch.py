"""Dispatch of one alert to the destinations of a spec's ``alerts`` block, against a real HTTP
endpoint on 127.0.0.1: the payload, which events go where, the secret URL kept out of every log
line and error, and endpoints that are down or hung (logged within the timeout, never raised)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.alerts import Alert, AlertKind, dispatch, send_alert
from barrierflow.errors import SpecError
from barrierflow.spec import parse_spec
from barrierflow.spec.alerts import AlertsSpec

from tests.pipeline_specs import spec_dict
from tests.spec.test_shared_paths import _staged as staged_spec_dict
from tests.support.logs import logged_messages
from tests.support.webhook_receiver import WebhookReceiver, closed_port_url, silent_endpoint

URL_ENV = "BARRIERFLOW_TEST_ALERT_URL"

#: What the callable destination below received.
CALLED: list[Alert] = []


def record(alert: Alert) -> None:
    CALLED.append(alert)


def explode(alert: Alert) -> None:
    raise RuntimeError("pager service refused the alert")


def alerts_block(*destinations: dict[str, Any], timeout: float = 5.0) -> AlertsSpec:
    return AlertsSpec.model_validate({"destinations": list(destinations), "timeout": timeout})


def stale_alert() -> Alert:
    return Alert.of("orders", AlertKind.CHECKPOINT_AGE, "latest completed checkpoint finished 900.0s ago",
                    runbook="https://wiki.example/barrierflow/operations", at=datetime(2026, 3, 1, 12, 0, tzinfo=UTC),
                    dag_id="barrierflow_supervise__orders", run_id="scheduled__1", task_id="supervise", try_number=1,
                    details={"age_seconds": 900.0, "max_age_seconds": 300.0})


def test_the_webhook_receives_the_alert_as_json(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        deliveries = dispatch(stale_alert(), alerts_block({"type": "webhook", "url_env": URL_ENV}))
        [request] = receiver.wait_for(1)

    assert [(d.delivered, d.detail) for d in deliveries] == [(True, "HTTP 200")]
    assert request.path == receiver.path and request.headers["Content-Type"] == "application/json"
    body = request.body
    assert body["version"] == 1 and body["pipeline"] == "orders" and body["kind"] == "checkpoint_age"
    assert body["severity"] == "critical"
    assert body["runbook"] == "https://wiki.example/barrierflow/operations#checkpoint-age-breach"
    assert datetime.fromisoformat(body["time"]) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert (body["dag_id"], body["run_id"], body["task_id"], body["try_number"]) == (
        "barrierflow_supervise__orders", "scheduled__1", "supervise", 1)
    assert body["details"] == {"age_seconds": 900.0, "max_age_seconds": 300.0}
    assert "900.0s ago" in body["message"] and "barrierflow checkpoints list SPEC" in body["action"]
    assert body["text"].startswith("[barrierflow] pipeline orders: checkpoint age breach")
    assert body["runbook"] in body["text"]
    assert f"sent to webhook (url from ${URL_ENV}) (HTTP 200)" in logged_messages(caplog)
    assert receiver.url not in caplog.text and receiver.path not in logged_messages(caplog)


def test_each_destination_gets_only_the_events_it_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLED.clear()
    with WebhookReceiver() as receiver:
        monkeypatch.setenv(URL_ENV, receiver.url)
        alerts = alerts_block({"type": "webhook", "url_env": URL_ENV, "events": ["gave_up"]},
                              {"type": "callable", "function": f"{__name__}:record"})
        [called] = dispatch(stale_alert(), alerts)
        assert called.delivered and called.destination == f"callable {__name__}:record"
        send_alert("orders", alerts, AlertKind.GAVE_UP, "restart strategy allows no further restart")
        [request] = receiver.wait_for(1)

    assert request.body["kind"] == "gave_up" and request.body["runbook"].endswith("#restart-strategy-gave-up")
    assert [a.kind for a in CALLED] == [AlertKind.CHECKPOINT_AGE, AlertKind.GAVE_UP]
    assert CALLED[0].details["age_seconds"] == 900.0


@pytest.mark.parametrize("endpoint", ["http 500", "closed port"])
def test_a_failing_endpoint_is_logged_without_its_url_and_not_raised(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with WebhookReceiver(status=500) as receiver:
        url = receiver.url if endpoint == "http 500" else closed_port_url() + "/S3CR3T-hook-token"
        monkeypatch.setenv(URL_ENV, url)
        [delivery] = dispatch(stale_alert(), alerts_block({"type": "webhook", "url_env": URL_ENV}))

    assert not delivery.delivered
    assert ("HTTP 500" if endpoint == "http 500" else "cannot be reached") in delivery.detail
    messages = logged_messages(caplog)
    assert f"NOT delivered to webhook (url from ${URL_ENV})" in messages
    for text in (messages, caplog.text, delivery.detail):
        assert "S3CR3T" not in text and url not in text


def test_a_hung_endpoint_is_given_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    CALLED.clear()
    with silent_endpoint() as url:
        monkeypatch.setenv(URL_ENV, url)
        deliveries = dispatch(stale_alert(), alerts_block({"type": "webhook", "url_env": URL_ENV},
                                                          {"type": "callable", "function": f"{__name__}:record"},
                                                          timeout=0.5))

    # Given up by the timeout (not by the endpoint answering): the detail says so.
    webhook, called = deliveries
    assert not webhook.delivered and ("timed out" in webhook.detail or "no answer within 0.5 s" in webhook.detail)
    assert called.delivered and len(CALLED) == 1  # the other destination is not held up by it
    assert "NOT delivered to webhook" in logged_messages(caplog) and url not in caplog.text


def test_a_missing_variable_or_a_broken_callable_is_logged_naming_the_fix(caplog: pytest.LogCaptureFixture,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    deliveries = dispatch(stale_alert(), alerts_block(
        {"type": "webhook", "url_env": URL_ENV},
        {"type": "callable", "function": f"{__name__}:explode"},
        {"type": "callable", "function": "no_such_package.alerts:page"}))

    assert [d.delivered for d in deliveries] == [False, False, False]
    missing, raised, unimportable = (d.detail for d in deliveries)
    assert f"the environment variable {URL_ENV} is not set" in missing
    assert "it raised RuntimeError: pager service refused the alert" in raised
    assert "cannot import it" in unimportable and "installed where the alert is sent" in unimportable
    assert logged_messages(caplog).count("NOT delivered") == 3


def test_no_alerts_block_sends_nothing() -> None:
    assert dispatch(stale_alert(), None) == [] and send_alert("orders", None, AlertKind.RESTART, "x") == []


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Alert.of("orders", AlertKind.RESTART, "x", at=datetime(2026, 3, 1, 12, 0))  # noqa: DTZ001


# -- the spec block -------------------------------------------------------------------------------


def test_the_alerts_block_loads_on_both_spec_shapes(tmp_path: Path) -> None:
    block = {"timeout": "2s", "destinations": [{"type": "webhook", "conn_id": "barrierflow_alerts",
                                                "events": ["checkpoint_age", "gave_up"]},
                                               {"type": "callable", "function": "my_pkg.pager:page"}]}
    spec = parse_spec(spec_dict(tmp_path, alerts=block))
    assert spec.alerts is not None and spec.alerts.timeout == 2.0 and spec.alerts.runbook == "docs/operations.md"
    webhook, user = spec.alerts.destinations
    assert webhook.takes("gave_up") and not webhook.takes("restart") and user.takes("restart")
    assert parse_spec(spec_dict(tmp_path)).alerts is None

    from barrierflow.spec import parse_staged_spec

    staged = parse_staged_spec(staged_spec_dict(tmp_path, alerts=block))
    assert staged.alerts == spec.alerts


@pytest.mark.parametrize(("destination", "problem"), [
    ({"type": "webhook", "url": "https://hooks.example/S3CR3T"}, "alerts.destinations.0.webhook"),
    ({"type": "webhook"}, "give exactly one of url_env"),
    ({"type": "webhook", "url_env": "HOOK", "conn_id": "hook"}, "give exactly one of url_env"),
    ({"type": "webhook", "url_env": "HOOK", "events": ["launch"]}, "events"),
    ({"type": "callable", "function": "no_colon"}, "expected an import path"),
])
def test_a_bad_alerts_block_is_refused_without_echoing_a_url(tmp_path: Path, destination: dict[str, Any],
                                                            problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(spec_dict(tmp_path, alerts={"destinations": [destination]}))
    assert problem in str(refused.value) and "S3CR3T" not in str(refused.value)


def test_the_timeout_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="at most 60 s"):
        parse_spec(spec_dict(tmp_path, alerts={"timeout": "5 minutes",
                                               "destinations": [{"type": "callable", "function": "a.b:c"}]}))


def test_every_kind_links_a_section_of_the_operations_runbook() -> None:
    from tests.docs.test_readme import ROOT, anchors

    sections = anchors(ROOT / "docs" / "operations.md")
    assert {kind: kind.anchor in sections for kind in AlertKind} == {kind: True for kind in AlertKind}
