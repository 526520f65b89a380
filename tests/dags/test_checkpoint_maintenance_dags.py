"""The scheduled verification and retention DAGs run against a real checkpoint store.

The store is built without Spark by :class:`tests.verification.checkpoint_factory.CheckpointFactory`
(the real coordinator on a hand-written Spark checkpoint dir, pipeline ``t`` in
``tmp_path/checkpoints``); the DAGs are parsed from ``dags/`` with ``DagBag`` and their task
callables run the way Airflow runs them, with the DAG's own param defaults as context.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from barrierflow.airflow.errors import CheckpointVerificationError
from barrierflow.cli.main import main
from barrierflow.verification.report import report_key

from tests.dags.conftest import parse_dags
from tests.pipeline_specs import spec_dict, write_spec
from tests.support.logs import logged_messages
from tests.verification.checkpoint_factory import CheckpointFactory

RETAINED = 2


@pytest.fixture
def factory(tmp_path: Path) -> CheckpointFactory:
    return CheckpointFactory(tmp_path)


@pytest.fixture
def spec_path(tmp_path: Path, pipelines_dir: Path) -> Path:
    """Spec ``t`` on the factory's store, keeping the newest two checkpoints."""
    data = spec_dict(tmp_path)
    data["checkpoint"]["retained"] = RETAINED
    return write_spec(pipelines_dir, data, "t.yaml")


@pytest.fixture
def bag(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path) -> Any:
    parsed = parse_dags(monkeypatch, pipelines_dir)
    assert parsed.import_errors == {}
    return parsed


def run_task(bag: Any, dag_id: str, task_id: str, monkeypatch: pytest.MonkeyPatch, **params: Any) -> Any:
    """Call the task's callable as Airflow would; params default to the DAG's own."""
    import airflow.sdk

    dag = bag.dags[dag_id]
    context = {"params": {**{key: dag.params[key] for key in dag.params}, **params}}
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: context)
    task = dag.get_task(task_id)
    return task.python_callable(*task.op_args, **task.op_kwargs)


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _without_times(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without each stage report's ``started`` and ``finished``."""
    return {**summary, "reports": [{**r, "stages": {name: {k: v for k, v in stage.items()
                                                           if k not in ("started", "finished")}
                                                    for name, stage in r["stages"].items()}}
                                   for r in summary["reports"]]}


def test_verify_task_passes_on_intact_checkpoints_like_the_cli(
    bag: Any, factory: CheckpointFactory, spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    factory.take(4)

    with caplog.at_level(logging.INFO):
        summary = run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)

    # The newest checkpoint.retained checkpoints (the param default), all passed.
    assert summary["pipeline"] == "t" and summary["verified"] == RETAINED and summary["failed"] == []
    assert [r["checkpoint_id"] for r in summary["reports"]] == [3, 4]
    assert all(r["passed"] and not r["deep"] and list(r["stages"]) == ["t"] for r in summary["reports"])
    assert (tmp_path / "checkpoints" / report_key(4)).is_file()  # stored for restore and retention
    assert json.dumps(summary) in logged_messages(caplog)  # logged; returned = XCom return_value
    json.dumps(summary)  # XCom-serializable

    # The same document as `barrierflow verify SPEC --latest N --json`.
    assert main(["verify", str(spec_path), "--latest", str(RETAINED), "--json"]) == 0
    assert _without_times(json.loads(capsys.readouterr().out)) == _without_times(summary)

    # A manual run can verify more.
    assert run_task(bag, "barrierflow_verify__t", "verify", monkeypatch, latest=4)["verified"] == 4


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("flip-byte", r"checkpoint 4 failed the file check: state/0/1/\d+\.delta: sha256 mismatch"),
        ("delete-file", r"checkpoint 4 failed the file check: state/0/1/\d+\.delta: missing from the store"),
    ],
)
def test_verify_task_fails_naming_the_corrupted_checkpoint_and_check(
    bag: Any, factory: CheckpointFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    damage: str, expected: str,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    newest = factory.take(4)[-1]
    assert run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)["failed"] == []
    state_file = factory.shared_path(newest, f"state/0/1/{newest.state_version}.delta")
    if damage == "flip-byte":
        _flip_byte(state_file)
    else:
        state_file.unlink()

    # AirflowFailException: failed at once, not retried.
    with caplog.at_level(logging.INFO), pytest.raises(AirflowFailException, match=expected) as info:
        run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)

    message = str(info.value)
    assert "pipeline 't': 1 of 2 verified checkpoints" in message and "(checkpoint 4)" in message
    cause = info.value.__cause__
    assert isinstance(cause, CheckpointVerificationError)
    assert cause.summary["failed"] == [4] and cause.summary["verified"] == 2
    assert [(cid, name) for cid, name, _ in cause.failures] == [(4, "file")]
    assert json.dumps(cause.summary) in logged_messages(caplog)  # the summary is logged even though the task fails


def test_verify_task_passes_with_no_checkpoint_yet(bag: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)
    assert summary["verified"] == 0 and summary["reports"] == []


def test_verify_task_asks_for_deep_verification_when_the_param_says_so(
    bag: Any, spec_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import barrierflow.airflow.verification as verification

    calls: list[tuple[str, int, bool]] = []

    def fake(path: str, latest: int, *, deep: bool = False) -> dict[str, Any]:
        calls.append((path, latest, deep))
        return {"verified": 0}

    monkeypatch.setattr(verification, "verify_latest_checkpoints", fake)
    run_task(bag, "barrierflow_verify__t", "verify", monkeypatch, deep=True, latest=7)
    assert calls == [(str(spec_path.resolve()), 7, True)]


def test_retain_task_keeps_the_newest_verified_checkpoints(
    bag: Any, factory: CheckpointFactory, spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    factory.take(5)
    run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)  # verifies 4 and 5

    with caplog.at_level(logging.INFO):
        summary = run_task(bag, "barrierflow_retain__t", "retain", monkeypatch)

    assert summary["pipeline"] == "t" and summary["policy"] == "prefer-verified" and not summary["dry_run"]
    assert summary["kept"] == [4, 5] and summary["deleted"]["checkpoints"] == [1, 2, 3]
    assert summary["bytes_freed"] > 0
    assert json.dumps(summary) in logged_messages(caplog)
    store = tmp_path / "checkpoints"
    assert not [f for c in (1, 2, 3) for f in (store / f"chk-{c}").rglob("*") if f.is_file()]
    assert (store / "chk-5" / "_metadata.json").is_file()

    # Nothing is left to delete, and what is kept still verifies.
    assert main(["retain", str(spec_path), "--dry-run", "--json"]) == 0
    left = json.loads(capsys.readouterr().out)
    assert left["kept"] == [4, 5] and left["deleted"]["checkpoints"] == [] and left["bytes_freed"] == 0
    assert run_task(bag, "barrierflow_verify__t", "verify", monkeypatch)["failed"] == []
