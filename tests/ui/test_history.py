"""The Checkpoints page's data layer on real checkpoints (CheckpointFactory, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from barrierflow.checkpointing.manifest import FailureReason, FailureRecord
from barrierflow.ui import store_reader
from barrierflow.ui.history import Verdict, pipeline_history
from barrierflow.verification.report import CheckResult, VerificationReport, store_report

from tests.pipeline_specs import make_spec
from tests.verification.checkpoint_factory import CheckpointFactory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _verify(factory: CheckpointFactory, checkpoint_id: int, *, passed: bool, deep: bool = False) -> VerificationReport:
    check = (CheckResult.ok("files", "3 files present") if passed
             else CheckResult.fail("files", "state/0/0/1.delta: sha256 differs", file="state/0/0/1.delta"))
    report = VerificationReport(pipeline="t", checkpoint_id=checkpoint_id, deep=deep, started=T0,
                                finished=T0 + timedelta(seconds=1), checks=[check])
    store_report(factory.objects, report)
    return report


def test_rows_carry_the_manifests_values_newest_first(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    manifests = factory.take(3)

    history = pipeline_history(make_spec(tmp_path), factory.store)

    assert [r.checkpoint_id for r in history.rows] == [3, 2, 1]
    assert history.pipeline == "t" and history.total_completed == 3 and history.total_failed == 0
    for row, manifest in zip(history.rows, reversed(manifests), strict=True):
        assert row.status == "COMPLETED" and row.kind == manifest.kind.value
        assert (row.attempt, row.barrier_batch) == (manifest.attempt, manifest.spark_batch_id)
        assert (row.trigger_time, row.completion_time) == (manifest.trigger_time, manifest.completion_time)
        assert row.trigger_time.tzinfo is not None
        assert row.barrier_batch_ms == store_reader.barrier_batch_ms(manifest)
        assert (row.sync_ms, row.async_ms, row.total_ms) == (manifest.sync_ms, manifest.async_ms, manifest.total_ms)
        assert (row.full_bytes, row.incremental_bytes) == (manifest.full_bytes, manifest.incremental_bytes)
        assert row.verification.verdict is Verdict.NOT_VERIFIED
    assert history.as_dict()["checkpoints"][0]["sync_ms"] == manifests[-1].sync_ms
    assert history.as_dict()["checkpoints"][0]["trigger_time"] == manifests[-1].trigger_time.isoformat()


def test_failed_checkpoints_show_their_reason_and_verdicts_their_result(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(2)
    factory.store.record_failure(FailureRecord(
        pipeline="t", checkpoint_id=3, reason=FailureReason.UPLOAD_FAILED, message="disk full",
        trigger_time=T0, failure_time=T0 + timedelta(seconds=2), spark_batch_id=7))
    _verify(factory, 1, passed=True, deep=True)
    _verify(factory, 2, passed=False)

    rows = {r.checkpoint_id: r for r in pipeline_history(make_spec(tmp_path), factory.store).rows}

    failed = rows[3]
    assert failed.status == "FAILED" and failed.failure_reason == "UPLOAD_FAILED"
    assert failed.failure_message is not None and "disk full" in failed.failure_message
    assert "asynchronous phase" in failed.failure_message
    assert failed.barrier_batch == 7 and failed.completion_time is None and failed.sync_ms is None
    assert rows[1].verification.verdict is Verdict.PASSED and rows[1].verification.deep
    assert rows[2].verification.verdict is Verdict.FAILED
    assert "sha256 differs" in rows[2].verification.reason


def test_limit_keeps_the_newest(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(4)
    history = pipeline_history(make_spec(tmp_path), factory.store, limit=2)
    assert [r.checkpoint_id for r in history.rows] == [4, 3]
    assert history.total_completed == 4
    with pytest.raises(ValueError, match="limit"):
        pipeline_history(make_spec(tmp_path), factory.store, limit=0)


def test_reports_are_listed_only_when_stored(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(1)
    spec = make_spec(tmp_path)
    assert pipeline_history(spec, factory.store).reports == []

    factory.objects.put_bytes("reports/skew-latest.json", b"{}")
    assert [r.name for r in pipeline_history(spec, factory.store).reports] == ["skew"]

    factory.objects.put_bytes("reports/quality-latest.json", b"{}")
    assert [r.name for r in pipeline_history(spec, factory.store).reports] == ["skew", "quality"]


def test_the_comparison_report_is_linked_under_its_name_before_the_rename_until_a_new_one_exists(
        tmp_path: Path) -> None:
    """The stream-vs-batch comparison was stored as ``reports/reconciliation-latest.json`` before
    it was named "recompute": that file is linked as the ``recompute`` report while no
    ``reports/recompute-latest.json`` exists, and not once one does."""
    factory = CheckpointFactory(tmp_path)
    factory.take(1)
    spec = make_spec(tmp_path)

    factory.objects.put_bytes("reports/reconciliation-latest.json", b"{}")
    history = pipeline_history(spec, factory.store)
    assert [(r.name, r.key) for r in history.reports] == [("recompute", "reports/reconciliation-latest.json")]
    assert history.as_dict()["reports"] == [{"name": "recompute", "title": "Stream-vs-batch comparison (JSON)",
                                             "key": "reports/reconciliation-latest.json"}]

    factory.objects.put_bytes("reports/recompute-latest.json", b"{}")
    assert [(r.name, r.key) for r in pipeline_history(spec, factory.store).reports] == [
        ("recompute", "reports/recompute-latest.json")]


def test_barrier_batch_time_is_read_under_either_name() -> None:
    assert store_reader.barrier_batch_ms(SimpleNamespace(barrier_batch_ms=4.5, checkpoint_id=1)) == 4.5  # type: ignore[arg-type]
    assert store_reader.barrier_batch_ms(SimpleNamespace(alignment_ms=2.0, checkpoint_id=1)) == 2.0  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="neither"):
        store_reader.barrier_batch_ms(SimpleNamespace(checkpoint_id=1))  # type: ignore[arg-type]
