"""The launch guard's rules (recovery/restart_guard.py), without Airflow: what Airflow would
tell it (active recovery runs, the launch run's conf) is passed in."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import UserInputError
from barrierflow.lease import JobLease
from barrierflow.recovery.restart_guard import LaunchRefusedError, check_launch_allowed, mark_recovery
from barrierflow.spec import load_spec

from tests.pipeline_specs import spec_dict, write_spec

RECOVER = "barrierflow_recover__t"


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    return write_spec(tmp_path, spec_dict(tmp_path))


def check(spec_path: Path, conf: dict[str, object] | None = None, active: int = 0, starter: bool = False) -> str:
    return check_launch_allowed(spec_path, recovery_dag_id=RECOVER, launch_conf=conf or {},
                                active_recovery_runs=active, starter_active=starter)


def test_a_plain_launch_goes_ahead(spec_path: Path) -> None:
    assert "no recovery is in progress" in check(spec_path)


def test_a_held_lease_refuses_naming_its_purpose(spec_path: Path, tmp_path: Path) -> None:
    with JobLease(tmp_path / "work", "t", purpose="reconcile"), pytest.raises(LaunchRefusedError) as info:
        check(spec_path)
    assert info.value.reason == "lease" and "is being reconciled" in str(info.value)
    assert isinstance(info.value, UserInputError)


def test_an_active_recovery_refuses_others_but_not_its_own_restart(spec_path: Path) -> None:
    mark_recovery(spec_path, RECOVER, "manual__r1")
    with pytest.raises(LaunchRefusedError, match="recovery run 'manual__r1'") as info:
        check(spec_path, active=1)
    assert info.value.reason == "recovery-active"
    own = {"recovery_run_id": "manual__r1", "restored_attempt": "0"}
    assert "restart requested by recovery run 'manual__r1'" in check(spec_path, own, active=1, starter=True)
    with pytest.raises(LaunchRefusedError):  # its own restart, but a second recovery is active too
        check(spec_path, own, active=2, starter=True)


def test_a_superseded_restart_refuses(spec_path: Path) -> None:
    store = CheckpointStore.for_spec(load_spec(spec_path))
    store.begin_attempt([])
    store.begin_attempt([])  # a newer restore began attempt 2
    with pytest.raises(LaunchRefusedError, match="restored attempt 1, but a newer restore began attempt 2") as info:
        check(spec_path, {"recovery_run_id": "manual__r1", "restored_attempt": "1"})
    assert info.value.reason == "superseded"
    assert "attempt 2" in check(spec_path, {"recovery_run_id": "manual__r2", "restored_attempt": 2})


def test_a_garbled_restored_attempt_is_refused_naming_the_conf_key(spec_path: Path) -> None:
    with pytest.raises(LaunchRefusedError, match="'restored_attempt' is 'two'") as info:
        check(spec_path, {"recovery_run_id": "manual__r1", "restored_attempt": "two"})
    assert info.value.reason == "bad-conf" and "Spark was not started" in str(info.value)
