"""The recovery DAG (``barrierflow_recover__<name>``) and the reconciliation DAG
(``barrierflow_reconcile__<name>``) run against a real checkpoint store, without Spark.

Checkpoints come from :class:`tests.verification.checkpoint_factory.CheckpointFactory`
(pipeline ``t`` in ``tmp_path/checkpoints``, work dir ``tmp_path/work``), or, where real sink
transactions are needed, from the real coordinator and the real parquet sink on a hand-written
Spark checkpoint dir. The DAGs are parsed from ``dags/`` with ``DagBag``; each task callable is
called the way Airflow calls it: XCom arguments are the upstream tasks' return values, params
the DAG's defaults overridden per test.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.airflow.runbook import (
    ChosenCheckpointInvalidError,
    JobStillRunningError,
    RecoveryParamError,
    RecoveryParams,
    first_checkpoint_of_attempt,
    validate_recovery_params,
)
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, manifest_key
from barrierflow.cli.main import main
from barrierflow.errors import CheckpointNotFoundError, UserInputError
from barrierflow.lease import JobLease
from barrierflow.recovery.restore import DuplicateOutputError
from barrierflow.sinks.factory import build_sink
from barrierflow.spec import load_spec
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.workdir.layout import JobLayout

from tests.dags.conftest import parse_dags
from tests.pipeline_specs import spec_dict, write_spec
from tests.recovery import fake_pipeline
from tests.support.logs import logged_messages
from tests.verification.checkpoint_factory import CheckpointFactory

RECOVER = "barrierflow_recover__t"
RECONCILE = "barrierflow_reconcile__t"
LAUNCH = "barrierflow_pipeline__t"


# -- helpers ------------------------------------------------------------------------------


def run_task(bag: Any, dag_id: str, task_id: str, monkeypatch: pytest.MonkeyPatch,
             xcoms: dict[str, Any] | None = None, **params: Any) -> Any:
    """Call a TaskFlow task's callable (a unit test of the function; ``test_dag_runs.py`` runs the
    DAGs through Airflow itself): its XCom arguments resolved from ``xcoms`` (upstream task id ->
    return value), params the DAG's defaults plus ``params``."""
    import airflow.sdk
    from airflow.sdk import XComArg

    dag = bag.dags[dag_id]
    context = {"params": {**{key: dag.params[key] for key in dag.params}, **params}, "dag": dag,
               "run_id": "manual__unit-test"}
    monkeypatch.setattr(airflow.sdk, "get_current_context", lambda: context)
    task = dag.get_task(task_id)

    def resolve(value: Any) -> Any:
        return (xcoms or {})[value.operator.task_id] if isinstance(value, XComArg) else value

    return task.python_callable(*[resolve(a) for a in task.op_args],
                                **{k: resolve(v) for k, v in task.op_kwargs.items()})


def recover_context(bag: Any, **params: Any) -> dict[str, Any]:
    dag = bag.dags[RECOVER]
    return {"params": {**{key: dag.params[key] for key in dag.params}, **params}}


def flip_byte(factory: CheckpointFactory, manifest: Manifest) -> str:
    """Alter one state file only ``manifest`` uploaded; returns its path in the checkpoint."""
    path = f"state/0/1/{manifest.state_version}.delta"
    target = factory.shared_path(manifest, path)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    return path


def truncate_manifest(factory: CheckpointFactory, manifest: Manifest) -> str:
    key = manifest_key(manifest.checkpoint_id)
    target = factory.tmp_path / "checkpoints" / key
    target.write_bytes(target.read_bytes()[:200])
    return key


def parquet_pipeline(tmp_path: Path, pipelines_dir: Path, checkpoints: int) -> tuple[Path, CheckpointStore]:
    """Pipeline ``t`` (spec in ``pipelines_dir``) with the real parquet sink and ``checkpoints``
    completed checkpoints (see :mod:`tests.recovery.fake_pipeline`)."""
    spec_path, _spec, store = fake_pipeline.parquet_pipeline(tmp_path, checkpoints, pipelines_dir)
    return spec_path, store


def precommit_in_doubt(tmp_path: Path, spec_path: Path, store: CheckpointStore, epoch: int) -> str:
    """Stage batch ``epoch - 1`` and pre-commit it as epoch ``epoch``, whose checkpoint never
    completes (the driver died before its manifest). Returns the transaction id."""
    spec = load_spec(spec_path)
    sink = build_sink(spec, store, JobLayout.for_spec(spec), attempt=0)
    write_ahead_batch(f"file://{tmp_path / 'out' / '_staging'}", epoch - 1, pa.table({"key": [epoch], "n": [epoch]}))
    return str(sink.pre_commit_epoch(epoch, epoch - 1)[0]["transaction_id"])


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def spec_path(tmp_path: Path, pipelines_dir: Path) -> Path:
    """Spec ``t`` on the factory's store (discard sink, work dir ``tmp_path/work``)."""
    return write_spec(pipelines_dir, spec_dict(tmp_path), "t.yaml")


@pytest.fixture
def factory(tmp_path: Path) -> CheckpointFactory:
    """Checkpoints without sink transactions: restoring an older one duplicates nothing."""
    return CheckpointFactory(tmp_path, ledger_sink=False)


@pytest.fixture
def bag(monkeypatch: pytest.MonkeyPatch, pipelines_dir: Path, spec_path: Path) -> Any:
    parsed = parse_dags(monkeypatch, pipelines_dir)
    assert parsed.import_errors == {}
    return parsed


@pytest.fixture
def held_lease(tmp_path: Path) -> Any:
    """The job's run lease, held by this (live) process as a running job holds it."""
    lease = JobLease(tmp_path / "work", "t")
    lease.acquire()
    yield lease
    lease.release()


# -- params and the running job ----------------------------------------------------------

BAD_PARAMS = [
    ("checkpoint", "yesterday"),
    ("checkpoint", 0),
    ("checkpoint", -3),
    ("checkpoint", "0"),
    ("checkpoint", "-3"),
    ("checkpoint", 2.5),
    ("checkpoint", True),
    ("checkpoint", None),
    ("accept_duplicates", "yes"),
    ("restart", 1),
    ("wait_seconds", 0),
    ("wait_seconds", -60),
    ("wait_seconds", "600"),
    ("wait_seconds", True),
]


@pytest.mark.parametrize(("param", "value"), BAD_PARAMS)
def test_a_bad_param_fails_check_params_and_job_naming_it(
    bag: Any, monkeypatch: pytest.MonkeyPatch, param: str, value: Any
) -> None:
    from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

    # Airflow's JSON schema refuses it when the DAG is triggered from the UI or the API ...
    with pytest.raises(ParamValidationError):
        bag.dags[RECOVER].params.get_param(param).resolve(value)

    # ... and the first task refuses it too, at once (AirflowFailException: not retried).
    with pytest.raises(AirflowFailException) as info:
        run_task(bag, RECOVER, "check_params_and_job", monkeypatch, **{param: value})
    message = str(info.value)
    assert f"param {param!r} is {value!r}" in message and "must be" in message
    cause = info.value.__cause__
    assert isinstance(cause, RecoveryParamError) and isinstance(cause, UserInputError)
    assert cause.param == param and cause.value == value
    if param == "checkpoint":
        assert '"latest-valid", "latest" or a positive whole checkpoint id' in message


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, RecoveryParams("latest-valid", accept_duplicates=False, restart=True, wait_seconds=600)),
        ({"checkpoint": "latest"}, RecoveryParams("latest", False, True, 600)),
        ({"checkpoint": 7, "wait_seconds": 30}, RecoveryParams(7, False, True, 30)),
        ({"checkpoint": "12", "accept_duplicates": True, "restart": False},  # a UI text field sends a string
         RecoveryParams(12, True, False, 600)),
        ({"checkpoint": 3.0, "wait_seconds": 90.0, "unrelated": "ignored"}, RecoveryParams(3, False, True, 90)),
    ],
)
def test_good_params_are_accepted_and_normalized(
    bag: Any, monkeypatch: pytest.MonkeyPatch, given: dict[str, Any], expected: RecoveryParams
) -> None:
    assert validate_recovery_params(given) == expected
    params = bag.dags[RECOVER].params
    for name, value in given.items():
        if name in params:
            params.get_param(name).resolve(value)  # the schema takes it as well
    checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, **given)
    assert checked == expected.as_dict()
    json.dumps(checked)  # XCom-serializable


def test_a_running_job_fails_check_params_and_job_saying_how_to_stop_it(
    bag: Any, monkeypatch: pytest.MonkeyPatch, held_lease: JobLease, tmp_path: Path
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException) as info:
        run_task(bag, RECOVER, "check_params_and_job", monkeypatch)
    message = str(info.value)
    assert "pipeline 't' is running" in message and "stop it before recovering" in message
    assert f"kill {os.getpid()}" in message and str(tmp_path / "work" / "job.lease") in message
    assert f"'launch' task of DAG {LAUNCH!r}" in message
    assert isinstance(info.value.__cause__, JobStillRunningError)


def test_a_stopped_job_passes_once_its_lease_is_released(
    bag: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lease = JobLease(tmp_path / "work", "t")
    lease.acquire()
    lease.release()
    assert run_task(bag, RECOVER, "check_params_and_job", monkeypatch)["checkpoint"] == "latest-valid"


# -- choosing the checkpoint ---------------------------------------------------------------


def test_choose_latest_valid_skips_a_corrupted_newest_checkpoint(
    bag: Any, factory: CheckpointFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    manifests = factory.take(4)
    damaged = flip_byte(factory, manifests[-1])
    checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch)

    with caplog.at_level(logging.INFO):
        choice = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})

    assert choice["requested"] == "latest-valid" and choice["checkpoint_id"] == 3
    [skipped] = choice["skipped"]
    assert skipped["checkpoint_id"] == 4
    assert "failed verification" in skipped["reason"] and f"{damaged}: sha256 mismatch" in skipped["reason"]
    assert "skipped checkpoint 4" in logged_messages(caplog) and "chose checkpoint 3" in logged_messages(caplog)
    json.dumps(choice)


@pytest.mark.parametrize(
    ("requested", "damage", "check", "detail"),
    [
        (4, flip_byte, "file", "sha256 mismatch"),
        ("4", flip_byte, "file", "sha256 mismatch"),
        ("latest", truncate_manifest, "manifest", "unreadable manifest"),
        (3, lambda f, m: "", None, None),  # an intact explicit id passes
    ],
)
def test_choose_an_explicit_or_latest_checkpoint_verifies_it_first(
    bag: Any, factory: CheckpointFactory, monkeypatch: pytest.MonkeyPatch,
    requested: Any, damage: Any, check: str | None, detail: str | None,
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    manifests = factory.take(4)
    damage(factory, manifests[-1])
    checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, checkpoint=requested)

    if check is None:
        choice = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})
        assert choice == {"pipeline": "t", "requested": 3, "checkpoint_id": 3, "skipped": [],
                          "verification": "passed structural verification"}
        return
    with pytest.raises(AirflowFailException) as info:
        run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})
    message = str(info.value)
    assert "checkpoint 4 of pipeline 't'" in message and f"failed the {check} check" in message
    assert detail in message and "checkpoint='latest-valid'" in message
    cause = info.value.__cause__
    assert isinstance(cause, ChosenCheckpointInvalidError) and cause.checkpoint_id == 4
    assert check in [name for name, _ in cause.failures]


def test_choose_a_missing_checkpoint_fails(bag: Any, factory: CheckpointFactory,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    factory.take(2)
    checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, checkpoint=9)
    with pytest.raises(AirflowFailException, match="checkpoint 9 of pipeline t does not exist") as info:
        run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})
    assert isinstance(info.value.__cause__, CheckpointNotFoundError)


def test_choose_with_no_checkpoint_at_all_fails(bag: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    for requested in ("latest-valid", "latest"):
        checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, checkpoint=requested)
        with pytest.raises(AirflowFailException, match=r"no (completed )?checkpoint"):
            run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})


# -- restore, restart, wait, report ------------------------------------------------------


def test_recovery_restores_the_chosen_checkpoint_restarts_and_waits_for_the_new_attempt(
    bag: Any, factory: CheckpointFactory, spec_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from airflow.sdk import PokeReturnValue

    manifests = factory.take(4)
    flip_byte(factory, manifests[-1])
    xcoms: dict[str, Any] = {}
    xcoms["check_params_and_job"] = run_task(bag, RECOVER, "check_params_and_job", monkeypatch)
    xcoms["choose_checkpoint"] = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, xcoms)

    with caplog.at_level(logging.INFO):
        report = run_task(bag, RECOVER, "restore", monkeypatch, xcoms)
    xcoms["restore"] = report

    assert report["pipeline"] == "t" and report["checkpoint_id"] == 3 and report["attempt"] == 1
    assert report["abandoned"] == [4] and report["decisions"] == [] and report["replay"] is None
    restored = tmp_path / "work" / "spark-checkpoint"
    assert (restored / "commits" / str(manifests[2].spark_batch_id)).is_file()
    assert not (restored / "commits" / str(manifests[3].spark_batch_id)).exists()
    assert sorted(p.relative_to(restored).as_posix() for p in restored.rglob("*") if p.is_file()) == sorted(
        f.path for f in manifests[2].files)
    assert "restored checkpoint 3 of t" in logged_messages(caplog) and json.dumps(report) in logged_messages(caplog)
    json.dumps(report)

    # restart: triggers the launch DAG (its pre_execute hook lets it run when restart is true).
    restart = bag.dags[RECOVER].get_task("restart")
    assert restart.trigger_dag_id == LAUNCH
    restart._pre_execute_hook(recover_context(bag))

    # wait_for_first_checkpoint: not done until the restarted job completes a checkpoint of attempt 1.
    sensor = bag.dags[RECOVER].get_task("wait_for_first_checkpoint")
    sensor.restore_report = report  # what rendering the template field resolves at run time
    assert first_checkpoint_of_attempt(spec_path, 1) is None
    assert sensor.poke(recover_context(bag)) is False
    factory.coordinator.attempt = report["attempt"]  # the restarted job writes the new attempt
    [new] = factory.take(1)
    assert new.attempt == 1 and new.checkpoint_id == 5  # a new id: 4 stays abandoned
    assert first_checkpoint_of_attempt(spec_path, 1) == 5
    poked = sensor.poke(recover_context(bag))
    assert isinstance(poked, PokeReturnValue) and poked.is_done and poked.xcom_value == 5
    assert first_checkpoint_of_attempt(spec_path, 2) is None

    with caplog.at_level(logging.INFO):
        summary = run_task(bag, RECOVER, "report", monkeypatch, {**xcoms, "wait_for_first_checkpoint": 5})
    assert {k: summary[k] for k in ("pipeline", "requested", "checkpoint_id", "attempt", "abandoned", "decisions",
                                    "replay", "restarted", "first_checkpoint_id")} == {
        "pipeline": "t", "requested": "latest-valid", "checkpoint_id": 3, "attempt": 1, "abandoned": [4],
        "decisions": [], "replay": None, "restarted": True, "first_checkpoint_id": 5}
    assert [s["checkpoint_id"] for s in summary["skipped"]] == [4]
    assert "checkpoint 5 is the first completed checkpoint of attempt 1" in summary["message"]
    assert "skipped checkpoint 4" in logged_messages(caplog)
    json.dumps(summary)


def test_restart_false_skips_the_restart_and_the_report_says_so(
    bag: Any, factory: CheckpointFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    factory.take(2)
    xcoms: dict[str, Any] = {}
    xcoms["check_params_and_job"] = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, restart=False)
    xcoms["choose_checkpoint"] = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, xcoms)
    xcoms["restore"] = run_task(bag, RECOVER, "restore", monkeypatch, xcoms)
    assert xcoms["restore"]["checkpoint_id"] == 2 and xcoms["restore"]["abandoned"] == []

    with pytest.raises(AirflowSkipException, match="restart is false"):
        bag.dags[RECOVER].get_task("restart")._pre_execute_hook(recover_context(bag, restart=False))

    # The skipped restart skips the sensor; the report (trigger rule none_failed) still runs.
    summary = run_task(bag, RECOVER, "report", monkeypatch, {**xcoms, "wait_for_first_checkpoint": None},
                       restart=False)
    assert summary["restarted"] is False and summary["first_checkpoint_id"] is None
    assert "not restarted (restart=false)" in summary["message"]


def test_sensor_defers_to_the_triggerer_with_the_param_wait_seconds_as_timeout(
    bag: Any, factory: CheckpointFactory, spec_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    from datetime import timedelta

    from airflow.sdk.exceptions import TaskDeferred
    from barrierflow.airflow.supervision import FirstCheckpointTrigger

    factory.take(1)  # attempt 0 only
    sensor = bag.dags[RECOVER].get_task("wait_for_first_checkpoint")
    sensor.restore_report = {"attempt": 1}
    for params, timeout in (({"wait_seconds": 42}, 42.0), ({}, 600.0)):
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(recover_context(bag, **params))
        trigger = deferred.value.trigger
        assert isinstance(trigger, FirstCheckpointTrigger) and trigger.attempt == 1
        assert deferred.value.timeout == timedelta(seconds=timeout)
        assert deferred.value.method_name == "execute_complete"

    # The trigger (rebuilt from its serialized form, as the triggerer does) fires once attempt 1 completed one.
    classpath, kwargs = trigger.serialize()
    assert classpath == "barrierflow.airflow.supervision.FirstCheckpointTrigger"
    rebuilt = FirstCheckpointTrigger(**kwargs)
    monkeypatch.setenv("BARRIERFLOW_HOME", kwargs["barrierflow_home"])  # what the trigger sets, undone after
    assert rebuilt.check() is None
    factory.coordinator.attempt = 1
    [new] = factory.take(1)
    event = asyncio.run(anext(rebuilt.run()))
    assert event.payload == {"checkpoint_id": new.checkpoint_id}
    assert sensor.execute_complete(recover_context(bag), event.payload) == new.checkpoint_id
    # Once there, a new run of the sensor does not defer at all.
    assert sensor.execute(recover_context(bag)) == new.checkpoint_id


def test_restore_refuses_duplicate_output_unless_accepted(
    bag: Any, tmp_path: Path, spec_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    # Checkpoints whose sink transactions record no batch offsets: epoch 4 is committed but
    # cannot be replayed with its output suppressed.
    factory = CheckpointFactory(tmp_path)
    flip_byte(factory, factory.take(4)[-1])
    xcoms: dict[str, Any] = {}
    xcoms["check_params_and_job"] = run_task(bag, RECOVER, "check_params_and_job", monkeypatch)
    xcoms["choose_checkpoint"] = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, xcoms)
    assert xcoms["choose_checkpoint"]["checkpoint_id"] == 3

    with pytest.raises(AirflowFailException, match="checkpoint 3 is older than output already committed") as info:
        run_task(bag, RECOVER, "restore", monkeypatch, xcoms)
    cause = info.value.__cause__
    assert isinstance(cause, DuplicateOutputError) and str(cause) in str(info.value)  # the library's message
    assert "accept_duplicates=true" in str(info.value)  # and how to do that with this DAG
    assert CheckpointStore.for_spec(load_spec(spec_path)).attempt() == 0  # nothing was restored

    xcoms["check_params_and_job"] = run_task(bag, RECOVER, "check_params_and_job", monkeypatch,
                                             accept_duplicates=True)
    report = run_task(bag, RECOVER, "restore", monkeypatch, xcoms)
    assert report["checkpoint_id"] == 3 and report["attempt"] == 1 and report["replay"] is None


def test_restore_reconciles_sinks_and_plans_a_suppressed_replay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pipelines_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec_path, store = parquet_pipeline(tmp_path, pipelines_dir, 3)
    in_doubt = precommit_in_doubt(tmp_path, spec_path, store, 4)
    third = store.get(3)
    entry = third.file("state/0/1/3.delta")
    assert entry is not None and entry.uploaded
    (tmp_path / "checkpoints" / "shared" / entry.sha256[:2] / entry.sha256).unlink()
    bag = parse_dags(monkeypatch, pipelines_dir)
    xcoms: dict[str, Any] = {}
    xcoms["check_params_and_job"] = run_task(bag, RECOVER, "check_params_and_job", monkeypatch)
    xcoms["choose_checkpoint"] = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, xcoms)
    assert xcoms["choose_checkpoint"]["checkpoint_id"] == 2

    with caplog.at_level(logging.INFO):
        report = run_task(bag, RECOVER, "restore", monkeypatch, xcoms)

    assert report["checkpoint_id"] == 2 and report["abandoned"] == [3]
    assert [(d["transaction_id"], d["action"]) for d in report["decisions"]] == [(in_doubt, "ABORT")]
    ledger = TransactionLedger(store.objects, "t")
    assert ledger.get("out", 4).state is TxnState.ABORTED and ledger.get("out", 3).state is TxnState.COMMITTED
    assert report["replay"] is not None and report["replay"]["epochs"] == [3]
    assert report["replay"]["through"] == {"0": 30, "1": 30}
    assert "epochs [3] were already committed after checkpoint 2" in logged_messages(caplog)
    assert any(r.levelno == logging.WARNING and "output suppressed" in r.getMessage() for r in caplog.records)
    summary = run_task(bag, RECOVER, "report", monkeypatch, {**xcoms, "restore": report,
                                                            "wait_for_first_checkpoint": None})
    assert summary["replay"] == report["replay"] and summary["decisions"] == report["decisions"]


# -- reconciliation --------------------------------------------------------------------------


def test_reconcile_task_applies_the_decisions_like_the_cli(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pipelines_dir: Path, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec_path, store = parquet_pipeline(tmp_path, pipelines_dir, 2)
    ledger = TransactionLedger(store.objects, "t")
    in_doubt = precommit_in_doubt(tmp_path, spec_path, store, 3)
    two = ledger.get("out", 2)
    ledger.put(two.model_copy(update={"state": TxnState.PRECOMMITTED}))  # crashed before its commit
    bag = parse_dags(monkeypatch, pipelines_dir)
    capsys.readouterr()
    assert main(["reconcile", str(spec_path), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)

    with caplog.at_level(logging.INFO):
        summary = run_task(bag, RECONCILE, "reconcile", monkeypatch)

    assert summary["pipeline"] == "t" and summary["latest_completed"] == 2
    assert summary["job_running"] is False and summary["dry_run"] is False
    assert {(d["transaction_id"], d["action"]) for d in summary["decisions"]} == {
        (two.transaction_id, "COMMIT"), (in_doubt, "ABORT")}
    assert summary["decisions"] == planned["decisions"]  # the CLI's dry run showed exactly this
    assert ledger.get("out", 2).state is TxnState.COMMITTED and ledger.get("out", 3).state is TxnState.ABORTED
    assert json.dumps(summary) in logged_messages(caplog) and f"ABORT out {in_doubt}" in logged_messages(caplog)
    assert run_task(bag, RECONCILE, "reconcile", monkeypatch)["decisions"] == []  # nothing left in doubt


def test_reconcile_task_leaves_newer_transactions_alone_while_the_job_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pipelines_dir: Path, held_lease: JobLease
) -> None:
    spec_path, store = parquet_pipeline(tmp_path, pipelines_dir, 2)
    in_doubt = precommit_in_doubt(tmp_path, spec_path, store, 3)
    bag = parse_dags(monkeypatch, pipelines_dir)

    summary = run_task(bag, RECONCILE, "reconcile", monkeypatch)

    assert summary["job_running"] is True
    assert [(d["transaction_id"], d["action"]) for d in summary["decisions"]] == [(in_doubt, "NONE")]
    assert TransactionLedger(store.objects, "t").get("out", 3).state is TxnState.PRECOMMITTED


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
def test_restore_latest_and_the_recovery_dag_choose_and_verify_alike(
        bag: Any, factory: CheckpointFactory, spec_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], damaged: bool) -> None:
    """One rule for choosing a checkpoint: ``barrierflow restore --latest`` and the recovery
    DAG's choose task go through the same rule (``verification.choice.choose_checkpoint``, from
    ``ops.restore`` and, under the restore's lease, ``recovery.pipeline_restore``), verify the same
    checkpoint the same way, and come to the same verdict."""
    from airflow.sdk.exceptions import AirflowFailException
    from barrierflow.ops import restore as ops_restore
    from barrierflow.recovery import pipeline_restore
    from barrierflow.verification import global_cut as cut_rule

    manifests = factory.take(4)
    if damaged:
        flip_byte(factory, manifests[-1])
    chosen: list[tuple[str, Any]] = []  # (requested, checkpoint id or the refusal's message)
    verified: list[list[int]] = []
    real_choose, real_verify = ops_restore.choose_checkpoint, cut_rule.verify_checkpoints

    def choose_spy(pipeline: Any, requested: Any) -> Any:
        try:
            result = real_choose(pipeline, requested)
        except ChosenCheckpointInvalidError as exc:
            chosen.append((requested, str(exc)))
            raise
        chosen.append((requested, result.checkpoint_id))
        return result

    def verify_spy(spec: Any, store: Any, ids: list[int], **kwargs: Any) -> Any:
        verified.append(list(ids))
        return real_verify(spec, store, ids, **kwargs)

    monkeypatch.setattr(ops_restore, "choose_checkpoint", choose_spy)  # the DAG's choice
    monkeypatch.setattr(pipeline_restore, "choose_checkpoint", choose_spy)  # the CLI's, under the lease
    monkeypatch.setattr(cut_rule, "verify_checkpoints", verify_spy)

    checked = run_task(bag, RECOVER, "check_params_and_job", monkeypatch, checkpoint="latest")
    if damaged:
        with pytest.raises(AirflowFailException) as info:
            run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})
        dag_error = info.value.__cause__
        assert isinstance(dag_error, ChosenCheckpointInvalidError) and dag_error.checkpoint_id == 4
        assert main(["restore", str(spec_path), "--latest"]) == 2
        assert str(dag_error) in capsys.readouterr().err  # the CLI refuses with the very same verdict
    else:
        dag_choice = run_task(bag, RECOVER, "choose_checkpoint", monkeypatch, {"check_params_and_job": checked})
        assert main(["restore", str(spec_path), "--latest", "--json"]) == 0
        restored = json.loads(capsys.readouterr().out)
        assert restored["checkpoint_id"] == dag_choice["checkpoint_id"] == 4
        assert restored["verification"] == dag_choice["verification"] == "passed structural verification"
    assert [requested for requested, _ in chosen] == ["latest", "latest"]
    assert chosen[0][1] == chosen[1][1]  # the same checkpoint, or the same refusal
    assert verified == [[4], [4]]  # the same structural verification of the same checkpoint, before any restore
