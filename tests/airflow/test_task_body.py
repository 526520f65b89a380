"""The one wrapper of every task body (:func:`barrierflow.airflow.task_body.task_body`): environment
set-up, error mapping, and a wrapped body that Airflow sees as the body itself. No DAG is run."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping
from typing import Any

import pytest
from barrierflow.airflow.task_body import task_body
from barrierflow.errors import BarrierflowError, StorageError, UserInputError

from tests.support.logs import logged_messages


class CarriesSummary(BarrierflowError):
    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def test_sets_barrierflow_home_from_the_argument_unless_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    @task_body()
    def body(spec_path: str, barrierflow_home: str) -> str | None:
        return os.environ.get("BARRIERFLOW_HOME")

    monkeypatch.delenv("BARRIERFLOW_HOME", raising=False)
    assert body("spec.yaml", "/srv/project") == "/srv/project"
    assert body("spec.yaml", barrierflow_home="/elsewhere") == "/srv/project"  # set: kept

    @task_body()
    def without_home(recovery: dict[str, Any]) -> str | None:
        return os.environ.get("BARRIERFLOW_HOME")

    monkeypatch.delenv("BARRIERFLOW_HOME")
    assert without_home({}) is None  # no such argument: the environment is left alone


def test_named_errors_fail_at_once_with_their_message_and_cause_others_propagate() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    @task_body(UserInputError)
    def body(spec_path: str, barrierflow_home: str, error: Exception) -> None:
        raise error

    bad = UserInputError("param 'checkpoint' is 'x': trigger again with a valid value")
    with pytest.raises(AirflowFailException, match="trigger again with a valid value") as info:
        body("spec.yaml", "/home", bad)
    assert info.value.__cause__ is bad
    with pytest.raises(StorageError):  # retried by Airflow as its retries say
        body("spec.yaml", "/home", StorageError("store unreachable"))


def test_logs_the_document_a_named_error_carries_before_failing(caplog: pytest.LogCaptureFixture) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    @task_body(CarriesSummary, report_as="verification summary")
    def body(spec_path: str, barrierflow_home: str) -> None:
        raise CarriesSummary("checkpoint 3 failed manifest_sha", {"failed": 1})

    with caplog.at_level(logging.ERROR), pytest.raises(AirflowFailException, match="checkpoint 3"):
        body("spec.yaml", "/home")
    assert 'verification summary: {"failed": 1}' in logged_messages(caplog).splitlines()


def test_a_hint_extends_the_message_and_keeps_the_cause() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    def hint(exc: BaseException, arguments: Mapping[str, Any]) -> str | None:
        return f"trigger {arguments['spec_path']} again" if "again" in str(exc) else None

    @task_body(UserInputError, hint=hint)
    def body(spec_path: str, barrierflow_home: str, message: str) -> None:
        raise UserInputError(message)

    with pytest.raises(AirflowFailException) as info:
        body("spec.yaml", "/home", "would write again")
    assert str(info.value) == "would write again. trigger spec.yaml again"
    assert isinstance(info.value.__cause__, UserInputError)
    with pytest.raises(AirflowFailException) as info:
        body("spec.yaml", "/home", "bad param")
    assert str(info.value) == "bad param"


def test_the_wrapped_body_looks_like_the_body_to_airflow() -> None:
    """Name, docstring (the task's doc), annotations (multiple_outputs is inferred from the return
    type) and signature (``**context`` is passed when asked for) are the body's."""
    from airflow.sdk import task

    def body(spec_path: str, barrierflow_home: str, **context: Any) -> dict[str, Any]:
        """The body's contract."""
        return {"params": context["params"]}

    wrapped = task_body(UserInputError)(body)
    assert wrapped.__name__ == "body" and wrapped.__doc__ == "The body's contract."
    assert inspect.signature(wrapped) == inspect.signature(body)
    assert wrapped("spec.yaml", "/home", params={"kills": 1}) == {"params": {"kills": 1}}
    decorated = task(task_id="t")(wrapped)
    assert decorated.multiple_outputs is True and decorated.function is wrapped


def test_multiple_outputs_follow_a_return_type_named_only_in_the_bodys_module() -> None:
    from airflow.sdk import task

    from tests.airflow import task_body_return_types as module

    assert task(task_id="t")(task_body()(module.returns_mapping_alias)).multiple_outputs is True
    assert task(task_id="t")(task_body()(module.returns_number)).multiple_outputs is False
