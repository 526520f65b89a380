"""A stalled driver that wakes up after a restore is fenced off (issue 15, item 3).

The old driver runs as a process of its own and suspends itself (SIGSTOP) right after
checkpoint 2 completed, before its sinks were told: epoch 2 is pre-committed, not committed.
Its lease heartbeat stops, the lease expires, and a new attempt on "another host" (its own
work dir, the same checkpoint store and sink) restores the latest checkpoint and runs; once
it completed a further checkpoint the old driver is resumed (SIGCONT): its commit of epoch 2
must be refused by the fencing number, it must exit 1 with the fenced-off error having
written nothing, and the committed output, after the new attempt ran to the end, must equal
the failure-free output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.lease import highest_fence, lease_holder
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import committed_parts, read_committed
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger, TxnState

from tests.scenarios.harness import window_rows, windowed_spec
from tests.scenarios.suspension import suspended_driver, wait_until

RECORDS = 3000


def _committed_rows(out: Path) -> list[tuple[Any, ...]]:
    table = read_committed(f"file://{out}")
    return window_rows(table.to_pylist()) if table is not None else []


def _old_attempt_writes(store: CheckpointStore, out: Path) -> dict[str, Any]:
    """Everything the old driver (fence 1, attempt 0) could have written: decision records with
    fence 1, its ledger entries, manifests under fence 1 and committed files of attempt 0."""
    decisions = {o.key: json.loads(store.objects.get_bytes(o.key)) for o in store.objects.list("ledger/")
                 if o.key.endswith(".decision.json")}
    return {
        "decisions": {k: d for k, d in decisions.items() if d["fence"] == 1},
        "ledger": {t.checkpoint_id: t for t in TransactionLedger(store.objects, store.pipeline).list()
                   if t.attempt == 0},
        "manifests": sorted(o.key for o in store.objects.list("_writers/") if o.key.endswith(".fence-1")),
        "parts": sorted(p.key for p in committed_parts(f"file://{out}") if p.attempt == 0),
    }


def _other_host(spec_path: Path, tmp_path: Path) -> Path:
    """The same pipeline (name, checkpoint store, sink) with a work dir of its own."""
    data = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    data["work_dir"] = str(tmp_path / "work-host-b")
    path = tmp_path / "pipeline-host-b.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.slow(100)
def test_stalled_driver_is_fenced_off_after_a_restore(
        spark: Any, tmp_path: Path, reference_rows: Callable[[int], list[tuple[Any, ...]]]) -> None:
    out = tmp_path / "out"
    spec_a = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"}, records=RECORDS)
    spec_b = _other_host(spec_a, tmp_path)
    spec = load_spec(spec_a)
    store = CheckpointStore.for_spec(spec)
    ledger = TransactionLedger(store.objects, spec.name)

    resumed: dict[str, Any] = {}
    # The old driver suspends itself the 2nd time a checkpoint completes (manifest stored, sinks not told).
    with suspended_driver(spec_a, "after_manifest", "checkpoint", 180) as old:
        # Suspended with epoch 2 pre-committed but not committed, holding fence 1.
        assert [m.checkpoint_id for m in store.completed()] == [1, 2]
        epoch2 = ledger.get("out", 2)
        assert epoch2 is not None and epoch2.state is TxnState.PRECOMMITTED
        assert highest_fence(store.objects)["fence"] == 1  # type: ignore[index]

        # Its heartbeat stopped: the lease expires (TTL 2 s), and another host restores.
        wait_until(lambda: lease_holder(tmp_path / "work-host-b", store.objects) is None, "the stalled lease to expire",
                   30)
        assert main(["restore", str(spec_b), "--latest"]) == 0  # fence 2, attempt 1: commits epoch 2 itself
        assert store.attempt() == 1
        decision = json.loads(store.objects.get_bytes("ledger/out/txn-000000000002.decision.json"))
        assert decision == {**decision, "action": "COMMIT", "fence": 2}
        print(f"restored after {old.elapsed():.1f} s")
        # What the old attempt (fence 1, attempt 0) has written, as of now.
        before = _old_attempt_writes(store, out)

        def resume_old_after_a_further_checkpoint(job: StreamingJob) -> None:
            if "code" in resumed or job.coordinator is None or job.coordinator.completed_count < 1:
                return
            assert highest_fence(store.objects)["fence"] == 3  # type: ignore[index]  # the new run's
            print(f"new attempt at a further checkpoint after {old.elapsed():.1f} s")
            resumed["code"] = old.resume(timeout=120)  # it goes on to commit epoch 2: refused by the fence
            print(f"old driver ended after {old.elapsed():.1f} s")
            resumed["writes"] = _old_attempt_writes(store, out)

        # The new attempt (fence 3) runs to the end; after its first checkpoint the old driver wakes.
        result = StreamingJob(load_spec(spec_b), spark=spark, spec_path=str(spec_b)).run(
            until_exhausted=True, duration=600, on_tick=resume_old_after_a_further_checkpoint)
        assert result.completed
        stderr = old.stderr()

    assert resumed.get("code") == 1, f"the old driver exited {resumed.get('code')}:\n{stderr[-3000:]}"
    assert f"fenced off: pipeline {spec.name} was taken over to run at " in stderr, stderr[-3000:]
    assert "(fence 3); this driver (attempt 0, fence 1) lost its lease" in stderr
    # None of its writes happened: no decision, ledger change, manifest or output of attempt 0 since the restore.
    assert resumed["writes"] == before
    assert _old_attempt_writes(store, out) == before
    # Every record once.
    assert _committed_rows(out) == reference_rows(RECORDS)
