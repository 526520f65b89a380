"""A stage with an Iceberg and a Delta sink, driven as the checkpoint coordinator drives them
(no Spark): both pre-commit the epoch, then each commits it under the same checkpoint id. The
driver is killed after the first sink's table commit, before its ledger record and before the
second sink's commit; the restore applies the in-doubt rule per sink. In another test the two
sinks commit side by side through the coordinator's sink notifier and one of them fails while
the other commits; the restore again resolves each. The tables are read with pyiceberg and
``deltalake``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.checkpointing.sink_notifier import SinkNotifier
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.recovery.restore import DuplicateOutputError, refuse_torn_epochs
from barrierflow.sinks.factory import build_sinks
from barrierflow.spec import load_spec
from barrierflow.testing import FailingObjectStore
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.workdir.layout import JobLayout
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

from tests.pipeline_specs import spec_dict
from tests.sinks.lake_env import REPO, rows, stage


def two_table_spec(tmp_path: Path) -> Path:
    data = spec_dict(tmp_path, name="twotables", sinks=[
        {"name": "ice", "type": "iceberg", "table": "lake.totals"},
        {"name": "dl", "type": "delta", "path": f"file://{tmp_path}/tables/totals"}])
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_kill_between_two_sinks_commits_is_resolved_per_sink_each_table_committed_once(tmp_path: Path) -> None:
    spec_path = two_table_spec(tmp_path)
    spec = load_spec(spec_path)
    store, layout = CheckpointStore.for_spec(spec), JobLayout.for_spec(spec)
    first = build_sinks(spec, store, layout, attempt=0)
    for sink in first:  # the stage's one micro-batch, written ahead once per sink
        stage(sink.write_ahead.uri, 1, rows([1, 2, 3]))
    script = textwrap.dedent(f"""
        from barrierflow.checkpointing.store import CheckpointStore
        from barrierflow.sinks.factory import build_sinks
        from barrierflow.spec import load_spec
        from barrierflow.workdir.layout import JobLayout
        spec = load_spec({str(spec_path)!r})
        sinks = build_sinks(spec, CheckpointStore.for_spec(spec), JobLayout.for_spec(spec), attempt=0)
        for sink in sinks:
            sink.pre_commit_epoch(1, 1)
        for sink in sinks:
            sink.notify_checkpoint_complete(1, 1)
        raise SystemExit("not reached: the crash point should have killed this process")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BARRIERFLOW_CRASH_AT": "mid_sink_commit"})
    assert proc.returncode == -9, proc.stderr[-2000:]

    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}")
    delta_path = str(tmp_path / "tables" / "totals")
    assert len(catalog.load_table("lake.totals").snapshots()) == 1  # the first sink's commit reached its table
    assert not (tmp_path / "tables" / "totals" / "_delta_log").exists()  # the second sink's did not

    for sink in build_sinks(spec, store, layout, attempt=1):  # what a restore of checkpoint 1 does, per sink
        sink.restore(1, 1)

    snapshots = catalog.load_table("lake.totals").snapshots()
    assert [s.summary.additional_properties["barrierflow.checkpoint-id"] for s in snapshots] == ["1"]
    assert sorted(catalog.load_table("lake.totals").scan().to_arrow().column("key").to_pylist()) == [1, 2, 3]
    delta = DeltaTable(delta_path)
    assert [h["barrierflow.checkpoint-id"] for h in delta.history() if "barrierflow.checkpoint-id" in h] == ["1"]
    assert sorted(delta.to_pyarrow_table().column("key").to_pylist()) == [1, 2, 3]
    cut = json.loads((tmp_path / "checkpoints" / "cuts" / "chk-000000000001.json").read_text())
    assert cut["tables"]["ice"]["version"] == snapshots[0].snapshot_id and cut["tables"]["dl"]["version"] == 0


def test_restoring_a_checkpoint_before_an_epoch_one_sink_committed_and_another_did_not_is_refused(
        tmp_path: Path) -> None:
    spec = load_spec(two_table_spec(tmp_path))
    store, layout = CheckpointStore.for_spec(spec), JobLayout.for_spec(spec)
    ice, dl = build_sinks(spec, store, layout, attempt=0)
    for checkpoint in (1, 2):
        for sink in (ice, dl):
            stage(sink.write_ahead.uri, checkpoint, rows([checkpoint]))
            sink.pre_commit_epoch(checkpoint, checkpoint)
        ice.notify_checkpoint_complete(checkpoint, checkpoint)
        if checkpoint == 1:
            dl.notify_checkpoint_complete(checkpoint, checkpoint)  # epoch 2: the run stops before this
    txns = TransactionLedger(store.objects, spec.name).list()
    with pytest.raises(DuplicateOutputError, match=r"epoch 2 is committed by sink 'ice' but only pre-committed by "
                                                   r"sink 'dl'.*Restore the latest checkpoint first"):
        refuse_torn_epochs(spec.name, txns, 1)
    refuse_torn_epochs(spec.name, txns, 2)  # the latest: its restore commits epoch 2 in 'dl'


def test_one_sinks_commit_failing_while_the_other_commits_is_resolved_per_sink_on_restore(tmp_path: Path) -> None:
    """The stage's two sinks commit checkpoint 1 side by side (the coordinator's sink notifier);
    the Delta sink's table commit goes through but its ledger record fails (in doubt), while the
    Iceberg sink commits fully. The failure names the Delta sink; the restore then commits
    nothing twice: each table holds checkpoint 1 once, both ledger entries end COMMITTED and the
    cut lists both tables."""
    data = yaml.safe_load(two_table_spec(tmp_path).read_text())
    data["checkpoint"]["sink_commit_retries"] = 0
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_path)
    store, layout = CheckpointStore.for_spec(spec), JobLayout.for_spec(spec)
    ice, dl = build_sinks(spec, store, layout, attempt=0)
    records = FailingObjectStore(store.objects, matches=lambda key: key == "ledger/dl/txn-000000000001.json",
                                 failing=False)
    dl.ledger = TransactionLedger(records, spec.name)
    for sink in (ice, dl):
        stage(sink.write_ahead.uri, 1, rows([1, 2, 3]))
    notifier = SinkNotifier([ice, dl], label="pipeline twotables")
    notifier.pre_commit(1, 1)
    records.failing = True  # from here the Delta sink's ledger record of epoch 1 cannot be written
    notifier.notify_complete(1, 1)
    with pytest.raises(SinkCommitFailedError) as raised:
        notifier.flush()
    notifier.shutdown()
    assert (raised.value.sink, raised.value.checkpoint_id, raised.value.action) == ("dl", 1, "commit")
    assert "injected failure writing" in str(raised.value) and records.failures == 1
    states = {t.sink: t.state for t in TransactionLedger(store.objects, spec.name).list()}
    assert states == {"ice": TxnState.COMMITTED, "dl": TxnState.PRECOMMITTED}

    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}")
    delta_path = str(tmp_path / "tables" / "totals")
    assert DeltaTable(delta_path).transaction_version("twotables/twotables/dl") == 1  # its table commit landed

    for sink in build_sinks(spec, store, layout, attempt=1):  # the restore of checkpoint 1, per sink
        sink.restore(1, 1)

    states = {t.sink: t.state for t in TransactionLedger(store.objects, spec.name).list()}
    assert states == {"ice": TxnState.COMMITTED, "dl": TxnState.COMMITTED}
    snapshots = catalog.load_table("lake.totals").snapshots()
    assert [s.summary.additional_properties["barrierflow.checkpoint-id"] for s in snapshots] == ["1"]
    assert sorted(catalog.load_table("lake.totals").scan().to_arrow().column("key").to_pylist()) == [1, 2, 3]
    delta = DeltaTable(delta_path)
    assert [h["barrierflow.checkpoint-id"] for h in delta.history() if "barrierflow.checkpoint-id" in h] == ["1"]
    assert sorted(delta.to_pyarrow_table().column("key").to_pylist()) == [1, 2, 3]
    cut = json.loads((tmp_path / "checkpoints" / "cuts" / "chk-000000000001.json").read_text())
    assert cut["tables"]["ice"]["version"] == snapshots[0].snapshot_id and cut["tables"]["dl"]["version"] == 0
