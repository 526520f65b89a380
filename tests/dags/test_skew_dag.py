"""The hourly watermark-skew DAG runs its task against a real checkpoint store (built without
Spark, see :mod:`tests.reports.skew_store`), the way Airflow calls it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from barrierflow.reports.skew import NO_CHECKPOINTS, SKEW_REPORT_KEY, SkewExpectationError

from tests.dags.conftest import parse_dags
from tests.pipeline_specs import spec_dict, write_spec
from tests.reports.skew_store import healthy_store
from tests.support.logs import logged_messages


@pytest.fixture
def bag(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, tmp_path: Path) -> Any:
    write_spec(pipelines_dir, spec_dict(tmp_path), "t.yaml")
    parsed = parse_dags(monkeypatch, pipelines_dir)
    assert parsed.import_errors == {}
    return parsed


def run_skew(bag: Any) -> Any:
    task = bag.dags["barrierflow_skew__t"].get_task("skew")
    return task.python_callable(*task.op_args, **task.op_kwargs)


def test_skew_task_returns_the_json_summary(bag: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert run_skew(bag)["stages"]["t"]["message"] == NO_CHECKPOINTS  # nothing yet: not a failure

    healthy_store(tmp_path)
    with caplog.at_level(logging.INFO):
        summary = run_skew(bag)

    assert summary["pipeline"] == "t" and summary["passed"] is True and list(summary["stages"]) == ["t"]
    report = summary["stages"]["t"]
    assert [c["skew_seconds"] for c in report["checkpoints"]] == [3.0, 3.0, 3.0, 3.0]
    assert report["idle_partitions"] == ["events/2"]
    assert json.dumps(summary) in logged_messages(caplog)  # logged; returned = XCom return_value
    assert (tmp_path / "checkpoints" / SKEW_REPORT_KEY).is_file()


def test_skew_task_fails_without_retry_on_a_skewed_store(
    bag: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    healthy_store(tmp_path, skewed={3: 125.0})
    assert bag.dags["barrierflow_skew__t"].get_task("skew").retries == 0

    with caplog.at_level(logging.INFO), pytest.raises(
            AirflowFailException, match=r"checkpoint 3: skew 123s > max_skew 60s") as info:
        run_skew(bag)

    assert "pipeline 't'" in str(info.value)
    cause = info.value.__cause__
    assert isinstance(cause, SkewExpectationError)
    assert cause.summary["passed"] is False and cause.failures == ["stage t: checkpoint 3: skew 123s > max_skew 60s"]
    assert json.dumps(cause.summary) in logged_messages(caplog)  # the report is logged even though the task fails
