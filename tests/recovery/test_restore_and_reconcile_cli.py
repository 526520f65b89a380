"""`barrierflow restore` and `barrierflow reconcile` on checkpoints built by the real
coordinator over a hand-written Spark checkpoint directory (no Spark needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.checkpointing.store import CheckpointStore, shared_key
from barrierflow.cli.main import main
from barrierflow.sinks.factory import build_sink
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.workdir.layout import JobLayout

from tests.recovery.fake_pipeline import parquet_pipeline


def _pipeline(tmp_path: Path, checkpoints: int) -> tuple[Path, Any, CheckpointStore]:
    return parquet_pipeline(tmp_path, checkpoints)


def test_restore_latest_rebuilds_the_spark_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, spec, store = _pipeline(tmp_path, 3)
    layout = JobLayout.for_spec(spec)
    assert main(["restore", str(spec_path), "--latest", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["checkpoint_id"] == 3 and report["attempt"] == 1
    manifest = store.get(3)
    restored = sorted(p.relative_to(layout.spark_checkpoint).as_posix()
                      for p in layout.spark_checkpoint.rglob("*") if p.is_file())
    assert restored == sorted(f.path for f in manifest.files)
    assert (layout.spark_checkpoint.parent / "spark-checkpoint.replaced").is_dir()


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_restore_with_a_damaged_file_exits_2_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         damage: str) -> None:
    spec_path, _spec, store = _pipeline(tmp_path, 2)
    victim = next(f for f in store.get(2).files if f.path == "state/0/1/2.delta")
    path = Path(store.objects.root) / shared_key(victim.sha256)  # type: ignore[attr-defined]
    if damage == "missing":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[0] ^= 0xFF
        path.write_bytes(bytes(data))
    assert main(["restore", str(spec_path), "--checkpoint", "2"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint 2" in err and "state/0/1/2.delta" in err
    assert ("missing" if damage == "missing" else "altered") in err


def test_restore_of_a_missing_or_incomplete_checkpoint_exits_2(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, _spec, store = _pipeline(tmp_path, 1)
    assert main(["restore", str(spec_path), "--checkpoint", "7"]) == 2
    assert "checkpoint 7" in capsys.readouterr().err
    store.objects.delete("chk-1/_metadata.json")  # an incomplete checkpoint: no manifest
    assert main(["restore", str(spec_path), "--checkpoint", "1"]) == 2
    assert "no manifest" in capsys.readouterr().err


def test_reconcile_dry_run_lists_decisions_and_the_real_run_applies_exactly_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, spec, store = _pipeline(tmp_path, 2)
    ledger = TransactionLedger(store.objects, spec.name)
    layout = JobLayout.for_spec(spec)
    # A staged failure: epoch 3 pre-committed, then the driver died before manifest 3 …
    sink = build_sink(spec, store, layout, attempt=0)
    write_ahead_batch(f"file://{tmp_path / 'out' / '_staging'}", 2, pa.table({"key": [2], "n": [20]}))
    sink.pre_commit_epoch(3, 2)
    # … and epoch 2 was committed to the ledger as pre-committed only (crash before its commit).
    two = ledger.get("out", 2)
    ledger.put(two.model_copy(update={"state": TxnState.PRECOMMITTED}))
    before = sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file())

    assert main(["reconcile", str(spec_path), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    decided = {(d["transaction_id"], d["action"]) for d in plan["decisions"]}
    assert decided == {(f"bf.{spec.name}.out.e2.a0", "COMMIT"), (f"bf.{spec.name}.out.e3.a0", "ABORT")}
    assert sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file()) == before  # changed nothing

    assert main(["reconcile", str(spec_path), "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["decisions"] == plan["decisions"]
    assert ledger.get("out", 2).state is TxnState.COMMITTED
    assert ledger.get("out", 3).state is TxnState.ABORTED
    assert main(["reconcile", str(spec_path), "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decisions"] == []  # nothing left in doubt


def _hold_lease(work_dir: Path, purpose: str) -> subprocess.Popen[bytes]:
    """Another live process on this host holding the pipeline's lease for ``purpose``."""
    import socket
    from datetime import UTC, datetime

    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    (work_dir / "job.lease").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                    "purpose": purpose,
                                                    "started_at": datetime.now(UTC).isoformat()}))
    return holder


def test_restore_and_reconcile_exclude_each_other_through_the_lease(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A restore decides the sinks' transactions against an older checkpoint: nothing may
    reconcile, run or restore meanwhile. A running job only restricts what reconcile does."""
    spec_path, spec, _store = _pipeline(tmp_path, 2)
    work = JobLayout.for_spec(spec).work_dir
    holder = _hold_lease(work, "restore")
    try:
        assert main(["reconcile", str(spec_path), "--json"]) == 2
        assert "is being restored" in capsys.readouterr().err
        assert main(["restore", str(spec_path), "--latest"]) == 2
        err = capsys.readouterr().err
        assert "is being restored" in err and f"pid {holder.pid}" in err
    finally:
        holder.communicate(b"")
    # The holder is gone: its lease is stale and is taken over.
    assert main(["restore", str(spec_path), "--latest"]) == 0
    assert not (work / "job.lease").exists(), "the restore released its lease"
    capsys.readouterr()
    holder = _hold_lease(work, "run")
    try:
        assert main(["reconcile", str(spec_path), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["job_running"] is True
        assert main(["restore", str(spec_path), "--latest"]) == 2
        assert "is running" in capsys.readouterr().err
    finally:
        holder.communicate(b"")
