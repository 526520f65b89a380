"""When ``barrierflow run`` supervises (a ``restart:`` block, not under spark-submit) and the
command each attempt runs."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
from barrierflow.ops.supervised_run import (
    ATTEMPT_FLAG,
    RESTART_SUPERVISOR_ENV,
    SPARK_SUBMIT_ENV,
    _command,
    run_supervised,
)

from tests.pipeline_specs import spec_dict, write_spec


def test_a_spec_without_restart_block_is_run_unsupervised(tmp_path: Path) -> None:
    assert run_supervised(write_spec(tmp_path, spec_dict(tmp_path))) is None


def test_under_spark_submit_the_strategy_is_not_applied_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = spec_dict(tmp_path)
    data["restart"] = {"type": "fixed-delay", "attempts": 3}
    monkeypatch.setenv(SPARK_SUBMIT_ENV, "40000")
    with caplog.at_level(logging.WARNING):
        assert run_supervised(write_spec(tmp_path, data)) is None
    assert "restart strategy is not applied under a spark-submit of your own" in caplog.text
    assert "barrierflow_recover__t" in caplog.text


def test_an_attempt_of_the_airflow_launcher_runs_as_is_without_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = spec_dict(tmp_path)
    data["restart"] = {"type": "fixed-delay", "attempts": 3}
    monkeypatch.setenv(SPARK_SUBMIT_ENV, "40000")
    monkeypatch.setenv(RESTART_SUPERVISOR_ENV, "4242")  # the launcher applies the strategy around spark-submit
    with caplog.at_level(logging.INFO):
        assert run_supervised(write_spec(tmp_path, data)) is None
    assert "an attempt of the launcher pid 4242" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_each_attempt_runs_the_same_command_marked_as_an_attempt() -> None:
    command = _command("p.yaml", duration=12.5, checkpoints=3, until_exhausted=True, quiet=True, processes=True,
                       verbose=True)
    assert command[:4] == [sys.executable, "-m", "barrierflow.cli.main", "--verbose"]
    assert command[4:8] == ["run", "p.yaml", ATTEMPT_FLAG, str(os.getpid())]
    assert command[8:] == ["--duration", "12.500", "--checkpoints", "3", "--until-exhausted", "--quiet", "--processes"]
    assert "--duration" not in _command("p.yaml", duration=None, checkpoints=None, until_exhausted=False,
                                        quiet=False, processes=False, verbose=False)
