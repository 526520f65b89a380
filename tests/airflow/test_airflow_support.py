"""The Airflow side's helpers: spec discovery, DAG ids (airflow.dag_ids), the checkpoint freshness check
(airflow.freshness) and the verification schedule (airflow.verification)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from barrierflow.airflow.dag_ids import dag_id_for
from barrierflow.airflow.errors import CheckpointStaleError, CheckpointVerificationError
from barrierflow.airflow.freshness import check_checkpoint_freshness
from barrierflow.airflow.verification import VerificationSchedule, verification_schedule
from barrierflow.errors import BarrierflowError, CheckpointError, SpecError
from barrierflow.ops.discovery import discover_pipelines, discover_specs
from barrierflow.spec.models import StageSpec

from tests.dags.conftest import BROKEN_SPEC_YAML, spec_yaml

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def completed_at(when: datetime | None, seen: list[str] | None = None):
    def lookup(spec: StageSpec) -> datetime | None:
        if seen is not None:
            seen.append(spec.name)
        return when

    return lookup


@pytest.fixture
def spec_file(pipelines_dir: Path) -> Path:
    path = pipelines_dir / "orders.yaml"
    path.write_text(spec_yaml("orders", interval="10s"), encoding="utf-8")
    return path


def test_discover_specs_lists_yaml_files_sorted(pipelines_dir: Path) -> None:
    for name in ("b.yaml", "a.yaml", ".hidden.yaml", "notes.txt", "c.yml"):
        (pipelines_dir / name).write_text("x: 1\n", encoding="utf-8")
    (pipelines_dir / "sub").mkdir()
    (pipelines_dir / "sub" / "d.yaml").write_text("x: 1\n", encoding="utf-8")

    assert [p.name for p in discover_specs(pipelines_dir)] == ["a.yaml", "b.yaml"]


def test_discover_specs_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert discover_specs(tmp_path / "absent") == []


def test_dag_id_for() -> None:
    assert dag_id_for("demo", "pipeline") == "barrierflow_pipeline__demo"
    assert dag_id_for("demo", "supervise") == "barrierflow_supervise__demo"
    assert dag_id_for("demo", "verify") == "barrierflow_verify__demo"
    assert dag_id_for("demo", "retain") == "barrierflow_retain__demo"
    assert dag_id_for("demo", "recover") == "barrierflow_recover__demo"
    assert dag_id_for("demo", "reconcile") == "barrierflow_reconcile__demo"
    with pytest.raises(ValueError, match="unknown DAG kind"):
        dag_id_for("demo", "launch")


def test_discover_pipelines_reports_broken_and_duplicate_specs(pipelines_dir: Path) -> None:
    (pipelines_dir / "a.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    (pipelines_dir / "b.yaml").write_text(spec_yaml("orders"), encoding="utf-8")
    (pipelines_dir / "c d.yaml").write_text(BROKEN_SPEC_YAML, encoding="utf-8")

    found = {entry.path.name: entry for entry in discover_pipelines(pipelines_dir)}

    assert found["a.yaml"].name == "orders" and found["a.yaml"].spec is not None
    assert found["a.yaml"].error is None
    assert found["b.yaml"].spec is None and found["b.yaml"].name == "b"
    assert "already used by" in (found["b.yaml"].error or "")
    broken = found["c d.yaml"]
    assert broken.spec is None and broken.name == "c_d"
    assert "checkpoint_intervall" in (broken.error or "") and "checkpoint.storage" in (broken.error or "")


def test_fresh_checkpoint_returns_a_status_line(spec_file: Path) -> None:
    seen: list[str] = []
    status = check_checkpoint_freshness(
        spec_file, 30, now=NOW, latest_completion=completed_at(NOW - timedelta(seconds=12), seen)
    )
    assert seen == ["orders"]
    assert "\n" not in status
    assert "'orders'" in status and "12.0s ago" in status and "limit 30s" in status


def test_stale_checkpoint_raises(spec_file: Path) -> None:
    with pytest.raises(CheckpointStaleError, match=r"95\.0s ago.*older than the limit of 30s") as info:
        check_checkpoint_freshness(
            spec_file, 30, now=NOW, latest_completion=completed_at(NOW - timedelta(seconds=95))
        )
    assert info.value.pipeline == "orders"
    assert info.value.age_seconds == pytest.approx(95.0)
    assert info.value.max_age_seconds == 30
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, BarrierflowError)


def test_missing_checkpoint_raises(spec_file: Path) -> None:
    # The spec's relative storage URI resolves against the spec file's folder, and the message names it.
    where = re.escape(f"no completed checkpoint in file://{spec_file.parent / 'var' / 'orders'}")
    with pytest.raises(CheckpointStaleError, match=where) as info:
        check_checkpoint_freshness(spec_file, 30, now=NOW, latest_completion=completed_at(None))
    assert info.value.age_seconds is None


def test_age_exactly_at_the_limit_is_fresh(spec_file: Path) -> None:
    at_limit = completed_at(NOW - timedelta(seconds=30))
    check_checkpoint_freshness(spec_file, 30, now=NOW, latest_completion=at_limit)


def test_checkpoint_in_the_future_counts_as_fresh(spec_file: Path) -> None:
    status = check_checkpoint_freshness(
        spec_file, 30, now=NOW, latest_completion=completed_at(NOW + timedelta(seconds=3))
    )
    assert "0.0s ago" in status


def test_default_now_is_the_current_utc_time(spec_file: Path) -> None:
    check_checkpoint_freshness(spec_file, 60, latest_completion=completed_at(datetime.now(UTC)))


@pytest.mark.parametrize(
    ("now", "completion", "message"),
    [
        (NOW.replace(tzinfo=None), NOW, "now must be timezone-aware"),
        (NOW, NOW.replace(tzinfo=None), "is naive"),
    ],
)
def test_naive_datetimes_are_rejected(
    spec_file: Path, now: datetime, completion: datetime, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_checkpoint_freshness(spec_file, 30, now=now, latest_completion=completed_at(completion))


@pytest.mark.parametrize("max_age", [0, -5])
def test_max_age_must_be_positive(spec_file: Path, max_age: float) -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        check_checkpoint_freshness(spec_file, max_age, now=NOW, latest_completion=completed_at(NOW))


def test_invalid_spec_raises_spec_error(pipelines_dir: Path) -> None:
    path = pipelines_dir / "broken.yaml"
    path.write_text(BROKEN_SPEC_YAML, encoding="utf-8")
    with pytest.raises(SpecError, match="checkpoint_intervall"):
        check_checkpoint_freshness(path, 30, now=NOW, latest_completion=completed_at(NOW))


def test_verification_schedule_defaults_to_ten_minutes_and_the_retained_checkpoints(spec_file: Path) -> None:
    from barrierflow.spec import load_spec

    spec = load_spec(spec_file)
    assert spec.verification is None
    assert verification_schedule(spec) == VerificationSchedule(
        interval_seconds=600.0, latest=spec.checkpoint.retained, deep=False)


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("verification:\n  expectations: x.json\n", VerificationSchedule(600.0, 3, False)),
        ("verification:\n  interval: 1h\n  latest: 7\n  deep: true\n", VerificationSchedule(3600.0, 7, True)),
    ],
)
def test_verification_schedule_comes_from_the_spec(
    pipelines_dir: Path, section: str, expected: VerificationSchedule
) -> None:
    from barrierflow.spec import load_spec

    path = pipelines_dir / "orders.yaml"
    path.write_text(spec_yaml("orders") + section, encoding="utf-8")
    assert verification_schedule(load_spec(path)) == expected


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("verification:\n  interval: 30s\n", "at most once a minute"),
        ("verification:\n  latest: 0\n", "greater than or equal to 1"),
    ],
)
def test_bad_verification_settings_are_spec_errors(pipelines_dir: Path, section: str, problem: str) -> None:
    from barrierflow.spec import load_spec

    path = pipelines_dir / "orders.yaml"
    path.write_text(spec_yaml("orders") + section, encoding="utf-8")
    with pytest.raises(SpecError, match=problem):
        load_spec(path)


def test_verification_error_is_a_checkpoint_error() -> None:
    error = CheckpointVerificationError("orders", [(4, "file", "gone")], {"failed": [4]}, "detail")
    assert isinstance(error, CheckpointError) and isinstance(error, BarrierflowError)
    assert error.pipeline == "orders" and error.failures == [(4, "file", "gone")] and error.summary == {"failed": [4]}
