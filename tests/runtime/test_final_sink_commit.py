"""A sink commit that fails at the end of a run fails ``barrierflow run``, single-stage and multi-stage.

The run loop ends on the tick that completes the run's last checkpoint; that tick only queued
the final stage's sink commit, so no later tick can report its failure. The sink here
(:class:`barrierflow.testing.FailingCommitter` around the real Parquet sink) fails exactly
that commit: the second of a ``--checkpoints 2`` run. ``run`` must exit 1 with an error
naming the sink, the checkpoint and the fix; the epoch stays pre-committed, and
``barrierflow reconcile`` (the fix named) commits it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.pipeline.model import open_pipeline
from barrierflow.sinks import factory
from barrierflow.testing import FailingCommitter
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.transactions.ledger import TransactionLedger, TxnState

from tests.pipeline_specs import spec_dict
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import two_stage_spec

pytestmark = [pytest.mark.spark]


def fail_the_final_commit(monkeypatch: pytest.MonkeyPatch) -> list[FailingCommitter]:
    """Every sink named ``out`` the run builds (both shapes build theirs with
    :func:`barrierflow.sinks.factory.build_sink`) fails its second commit; the doubles made."""
    build = factory.build_sink
    made: list[FailingCommitter] = []

    def build_failing(*args: Any, **kwargs: Any) -> SinkCommitter:
        sink = build(*args, **kwargs)
        if sink.name != "out":
            return sink
        made.append(FailingCommitter(sink, fail_from=2))
        return made[-1]

    monkeypatch.setattr(factory, "build_sink", build_failing)
    return made


def run_and_reconcile(data: dict[str, Any], owner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    """Run ``data`` for two checkpoints with the second commit failing: exit 1, an error naming
    ``owner`` (the pipeline or final stage), the sink, the epoch and the fix; then the fix works."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    doubles = fail_the_final_commit(monkeypatch)
    capsys.readouterr()

    code = main(["run", str(path), "--checkpoints", "2", "--duration", "150", "--quiet"])

    err = capsys.readouterr().err
    (double,) = doubles
    assert len(double.committed) == 1 and len(double.failed) == 1, (double.committed, double.failed)
    failed = double.failed[0]
    assert code == 1, err
    assert f"{owner}: sink 'out': the commit of epoch {failed} (checkpoint {failed}, completed) failed" in err, err
    assert "barrierflow reconcile" in err and f"injected failure committing checkpoint {failed}" in err, err
    final = open_pipeline(path).stages[-1]
    ledger = TransactionLedger(final.store.objects, final.spec.name)
    txn = ledger.get("out", failed)
    assert txn is not None and txn.state is TxnState.PRECOMMITTED
    monkeypatch.undo()  # the sink answers again
    assert main(["reconcile", str(path)]) == 0
    txn = ledger.get("out", failed)
    assert txn is not None and txn.state is TxnState.COMMITTED


def test_a_failed_final_commit_fails_a_single_stage_run(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    data = spec_dict(tmp_path, source={"max_records_per_batch": 50, "keys": 20},
                     sinks=[{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}])
    run_and_reconcile(data, "pipeline t", tmp_path, monkeypatch, capsys)


@pytest.mark.kafka
def test_a_failed_final_commit_fails_a_multi_stage_run(spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run_and_reconcile(two_stage_spec(tmp_path, kafka_endpoint), "stage b of pipeline two", tmp_path, monkeypatch,
                      capsys)
