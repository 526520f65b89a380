"""Many checkpoints, cheaply: the real coordinator and a real LocalObjectStore on a
hand-written Spark checkpoint dir (no Spark). The store is ``tmp_path/checkpoints`` and the
pipeline ``t``, matching ``tests.pipeline_specs.make_spec(tmp_path)``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.coordinator import CheckpointCoordinator
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.checkpointing.store import CheckpointStore, shared_key
from barrierflow.spec.models import CheckpointSpec
from barrierflow.storage import ObjectStore
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.committer import SinkCommitter
from barrierflow.transactions.ledger import TransactionLedger, TxnState

from tests.checkpointing.fake_spark import FakeSparkCheckpoint


class LedgerSink(SinkCommitter):
    """A minimal 2PC sink: pre-commits into the ledger, commits on completion."""

    name = "out"

    def __init__(self, ledger: TransactionLedger) -> None:
        self.ledger = ledger

    def pre_commit_epoch(self, checkpoint_id: int, barrier_batch: int) -> list[dict[str, Any]]:
        txn = self.ledger.open(sink=self.name, sink_type="test", transaction_id=f"t-{checkpoint_id}",
                               checkpoint_id=checkpoint_id, attempt=0, batches=[barrier_batch], handle={})
        self.ledger.transition(txn, TxnState.PRECOMMITTED)
        return [{"sink": self.name, "transaction_id": txn.transaction_id, "checkpoint_id": checkpoint_id}]

    def notify_checkpoint_complete(self, checkpoint_id: int, barrier_batch: int) -> None:
        for txn in self.ledger.list(self.name):
            if txn.state is TxnState.PRECOMMITTED and txn.checkpoint_id <= checkpoint_id:
                self.ledger.transition(txn, TxnState.COMMITTED)


class CompactingSpark(FakeSparkCheckpoint):
    """Like Spark's maintenance: every ``snapshot_every`` batches a ``<v>.snapshot`` is
    written and older state, offsets and commits files are removed."""

    def __init__(self, root: Path, snapshot_every: int = 0) -> None:
        super().__init__(root)
        self.snapshot_every = snapshot_every

    def run_batch(self, batch: int, offsets: dict[str, int], barrier: int, delta_bytes: int = 100) -> None:
        super().run_batch(batch, offsets, barrier, delta_bytes)
        version = batch + 1
        if not self.snapshot_every or version % self.snapshot_every:
            return
        for p in range(self.state_partitions):
            part = self.root / "state" / "0" / str(p)
            (part / f"{version}.snapshot").write_bytes(bytes([version % 256, p, 7]) * 100)
            for f in part.iterdir():
                stem = f.name.split(".")[0]
                if stem.isdigit() and int(stem) < version - 2:
                    f.unlink()
        for log in ("offsets", "commits"):
            for f in (self.root / log).iterdir():
                if f.name.isdigit() and int(f.name) < batch - 2:
                    f.unlink()


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class CheckpointFactory:
    def __init__(self, tmp_path: Path, *, objects: ObjectStore | None = None, snapshot_every: int = 0,
                 ledger_sink: bool = True, pipeline: str = "t", timeout: float = 60.0) -> None:
        self.tmp_path = tmp_path
        self.objects = objects or LocalObjectStore(tmp_path / "checkpoints")
        self.store = CheckpointStore(self.objects, pipeline)
        self.spark = CompactingSpark(tmp_path / "fake-spark", snapshot_every)
        self.clock = _Clock()
        self.ledger = TransactionLedger(self.objects, pipeline)
        self.coordinator = CheckpointCoordinator(
            pipeline=pipeline, options=CheckpointSpec(storage="file://unused", interval=1.0, timeout=timeout,
                                   tolerable_failed_checkpoints=5),
            store=self.store, spark_checkpoint_dir=self.spark.root, snapshot_dir=tmp_path / "staging",
            control=ControlChannel(tmp_path / "control"), source_names=["events"],
            sinks=[LedgerSink(self.ledger)] if ledger_sink else None, monotonic=self.clock,
            now=lambda: datetime.now(UTC))
        self.coordinator.start()
        self.batch = 0
        self.offset = 0

    def trigger_and_barrier(self) -> int:
        """Trigger the next checkpoint and commit its barrier batch; the upload starts."""
        self.clock.t += 1.0
        self.coordinator.tick()
        cid = self.coordinator._next_id - 1
        self.offset += 10
        self.spark.run_batch(self.batch, {"0": self.offset, "1": self.offset}, barrier=cid)
        self.batch += 1
        self.coordinator.tick()
        return cid

    def finish(self) -> None:
        for pending in list(self.coordinator.pending.values()):
            if pending.upload is not None:
                pending.upload.exception(timeout=10)
        self.coordinator.tick()
        self.coordinator.flush_sinks()

    def take(self, count: int = 1) -> list[Manifest]:
        out = []
        for _ in range(count):
            cid = self.trigger_and_barrier()
            self.finish()
            out.append(self.store.get(cid))
        return out

    def shared_path(self, manifest: Manifest, relpath: str) -> Path:
        entry = manifest.file(relpath)
        assert entry is not None, relpath
        return self.tmp_path / "checkpoints" / shared_key(entry.sha256)
