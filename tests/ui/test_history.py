"""The Checkpoints page's data layer on real checkpoints of one stage (CheckpointFactory, no
Spark): its cuts are its checkpoints, each with its one stage's row (the rows of several stages
are tests/ui/test_global_history.py's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from barrierflow.checkpointing.manifest import FailureReason, FailureRecord
from barrierflow.ui import store_reader
from barrierflow.ui.history import PipelineHistory, Verdict, cut_history
from barrierflow.verification.report import CheckResult, VerificationReport, store_report

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pipeline_history(tmp_path: Path, factory: CheckpointFactory, *, limit: int = 50) -> PipelineHistory:
    """The history of the one-stage pipeline ``t`` whose checkpoints ``factory`` made in ``tmp_path``."""
    path = write_spec(tmp_path, spec_dict(tmp_path))
    from barrierflow.spec.loader import load_any_spec

    return cut_history(path, load_any_spec(path), factory.store, limit=limit)


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

    history = pipeline_history(tmp_path, factory)

    assert [r.checkpoint_id for r in history.rows] == [3, 2, 1]
    assert history.pipeline == "t" and history.total_completed == 3 and history.total_failed == 0
    assert history.stages == ("t",) and history.noun == "checkpoint"
    for row, manifest in zip(history.rows, reversed(manifests), strict=True):
        [stage] = row.stages
        assert row.status == "COMPLETED" and stage.kind == manifest.kind.value and stage.present
        assert (row.attempt, stage.barrier_batch) == (manifest.attempt, manifest.spark_batch_id)
        assert (row.trigger_time, row.completion_time) == (manifest.trigger_time, manifest.completion_time)
        assert row.trigger_time is not None and row.trigger_time.tzinfo is not None
        assert stage.barrier_batch_ms == store_reader.barrier_batch_ms(manifest)
        assert (stage.sync_ms, stage.async_ms, row.total_ms) == (manifest.sync_ms, manifest.async_ms,
                                                                 manifest.total_ms)
        assert (stage.full_bytes, stage.incremental_bytes) == (manifest.full_bytes, manifest.incremental_bytes)
        assert row.verification.verdict is stage.verification.verdict is Verdict.NOT_VERIFIED
    newest = history.as_dict()["checkpoints"][0]
    assert newest["stages"]["t"]["sync_ms"] == manifests[-1].sync_ms
    assert newest["trigger_time"] == manifests[-1].trigger_time.isoformat()


def test_failed_checkpoints_show_their_reason_and_verdicts_their_result(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(2)
    factory.store.record_failure(FailureRecord(
        pipeline="t", checkpoint_id=3, reason=FailureReason.UPLOAD_FAILED, message="disk full",
        trigger_time=T0, failure_time=T0 + timedelta(seconds=2), spark_batch_id=7))
    _verify(factory, 1, passed=True, deep=True)
    _verify(factory, 2, passed=False)

    rows = {r.checkpoint_id: r for r in pipeline_history(tmp_path, factory).rows}

    failed = rows[3]
    [stage] = failed.stages
    assert failed.status == "FAILED" and failed.failure_message is not None and "disk full" in failed.failure_message
    assert stage.failure is not None and stage.failure.startswith("UPLOAD_FAILED: ")
    assert "asynchronous phase" in stage.failure and "disk full" in stage.failure
    assert stage.barrier_batch == 7 and failed.completion_time is None and stage.sync_ms is None
    assert failed.trigger_time == T0
    assert rows[1].verification.verdict is Verdict.PASSED and rows[1].verification.deep
    assert rows[2].verification.verdict is Verdict.FAILED
    assert "sha256 differs" in rows[2].verification.reason


def test_limit_keeps_the_newest(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(4)
    history = pipeline_history(tmp_path, factory, limit=2)
    assert [r.checkpoint_id for r in history.rows] == [4, 3]
    assert history.total_completed == 4
    with pytest.raises(ValueError, match="limit"):
        pipeline_history(tmp_path, factory, limit=0)


def test_reports_are_listed_only_when_stored(tmp_path: Path) -> None:
    factory = CheckpointFactory(tmp_path)
    factory.take(1)
    assert pipeline_history(tmp_path, factory).reports == []

    factory.objects.put_bytes("reports/skew-latest.json", b"{}")
    assert [r.name for r in pipeline_history(tmp_path, factory).reports] == ["skew"]

    factory.objects.put_bytes("reports/quality-latest.json", b"{}")
    assert [r.name for r in pipeline_history(tmp_path, factory).reports] == ["skew", "quality"]


def test_the_comparison_report_is_linked_under_its_name_before_the_rename_until_a_new_one_exists(
        tmp_path: Path) -> None:
    """The stream-vs-batch comparison was stored as ``reports/reconciliation-latest.json`` before
    it was named "recompute": that file is linked as the ``recompute`` report while no
    ``reports/recompute-latest.json`` exists, and not once one does."""
    factory = CheckpointFactory(tmp_path)
    factory.take(1)

    factory.objects.put_bytes("reports/reconciliation-latest.json", b"{}")
    history = pipeline_history(tmp_path, factory)
    assert [(r.name, r.key) for r in history.reports] == [("recompute", "reports/reconciliation-latest.json")]
    assert history.as_dict()["reports"] == [{"name": "recompute", "title": "Stream-vs-batch comparison (JSON)",
                                             "key": "reports/reconciliation-latest.json"}]

    factory.objects.put_bytes("reports/recompute-latest.json", b"{}")
    assert [(r.name, r.key) for r in pipeline_history(tmp_path, factory).reports] == [
        ("recompute", "reports/recompute-latest.json")]


def test_barrier_batch_time_is_read_under_either_name() -> None:
    assert store_reader.barrier_batch_ms(SimpleNamespace(barrier_batch_ms=4.5, checkpoint_id=1)) == 4.5  # type: ignore[arg-type]
    assert store_reader.barrier_batch_ms(SimpleNamespace(alignment_ms=2.0, checkpoint_id=1)) == 2.0  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="neither"):
        store_reader.barrier_batch_ms(SimpleNamespace(checkpoint_id=1))  # type: ignore[arg-type]
