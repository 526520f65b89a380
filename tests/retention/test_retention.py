"""Retention: the kept set, reference counting, dry run, savepoints, in-flight reservations
and bounded storage, on checkpoints built by the real coordinator (no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.reservations import (
    RUNNING_KEY,
    RetentionRunWatch,
    begin_run,
    end_run,
    owner_gone,
    run_owner_id,
)
from barrierflow.checkpointing.store import shared_key
from barrierflow.cli.main import main
from barrierflow.retention.plan import retain
from barrierflow.retention.policy import RetentionPolicy, choose_retained
from barrierflow.retention.savepoint import take_savepoint
from barrierflow.sinks.cut import CutLog
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import TxnState
from barrierflow.upgrade.record import UpgradeRecord, UpgradeStep, recorded_upgrades, write_record
from barrierflow.verification.runner import verify_checkpoints

from tests.pipeline_specs import make_spec, spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory


def _listing(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_policy() -> None:
    ids = list(range(1, 11))
    assert choose_retained(ids, 3, RetentionPolicy.NEWEST, {10: False}) == {8, 9, 10}
    # Verified 4, 6, 7; failed 9; unverified 1-3, 5, 8, 10.
    verdicts = {4: True, 6: True, 7: True, 9: False}
    assert choose_retained(ids, 2, RetentionPolicy.PREFER_VERIFIED, verdicts) == {7, 6, 10, 8, 9}  # 9: uncounted
    assert choose_retained(ids, 3, RetentionPolicy.PREFER_VERIFIED, {}) == {8, 9, 10}
    assert choose_retained([1, 2, 3], 3, RetentionPolicy.PREFER_VERIFIED, {3: True}) == {3, 2, 1}
    assert choose_retained([1, 2, 3], 2, RetentionPolicy.PREFER_VERIFIED, {1: True, 3: False}) == {1, 2, 3}
    assert choose_retained([1, 2, 3, 4], 2, RetentionPolicy.PREFER_VERIFIED, {3: True, 4: True, 1: False}) == {3, 4}
    assert choose_retained([1, 2, 3], 2, RetentionPolicy.PREFER_VERIFIED, dict.fromkeys([1, 2, 3], False)) == {2, 3}


def test_retention_keeps_the_policy_set_and_deletes_every_unreferenced_file(tmp_path: Path, capsys) -> None:
    f = CheckpointFactory(tmp_path, snapshot_every=4)
    f.take(8)
    spec = make_spec(tmp_path, checkpoint={"retained": 3})
    spec_path = write_spec(tmp_path, spec_dict(tmp_path, checkpoint={"retained": 3}))
    assert take_savepoint(spec, f.store, 3).kind is CheckpointKind.SAVEPOINT
    f.take(8)  # 16 checkpoints; 3 is a savepoint
    verify_checkpoints(spec, f.store, [14, 15, 16])
    f.ledger.put(f.ledger.get("out", 15).model_copy(update={"state": TxnState.ABORTED}))
    verify_checkpoints(spec, f.store, [15])  # 15 now fails verification: uncounted, kept while in the window
    store_root = tmp_path / "checkpoints"
    (store_root / "shared" / "ff").mkdir(exist_ok=True)
    (store_root / "shared" / "ff" / ("ff" * 32)).write_bytes(b"orphan")  # e.g. from a crashed upload
    before = _listing(store_root)

    assert main(["retain", str(spec_path), "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert _listing(store_root) == before  # the dry run changed nothing

    assert main(["retain", str(spec_path), "--json"]) == 0
    real = json.loads(capsys.readouterr().out)
    def planned(document: dict) -> dict:  # the document without the dry-run flags (the pipeline's, the stage's)
        return {k: v if k != "stages" else {n: {**s, "dry_run": None} for n, s in v.items()}
                for k, v in document.items() if k != "dry_run"}

    assert planned(real) == planned(dry)
    assert real["deleted"]["checkpoints"] == real["stages"]["t"]["deleted"]["checkpoints"]
    assert real["kept"] == [13, 14, 15, 16] and real["savepoints"] == [3]
    assert real["deleted"]["checkpoints"] == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    after = _listing(store_root)
    deleted = set(before) - set(after)
    assert real["bytes_freed"] == sum(len(before[k]) for k in deleted) > 0
    assert set(after) - set(before) == {"_retention/last.json"}  # the run is recorded
    assert f.store.checkpoint_ids() == [3, 13, 14, 15, 16]
    kept_digests = {e.sha256 for cid in (3, 13, 14, 15, 16) for e in f.store.get(cid).files}
    for digest in kept_digests:  # nothing a kept manifest references was deleted
        assert shared_key(digest) in after
    stored = {k.rsplit("/", 1)[-1] for k in after if k.startswith("shared/")}
    assert stored == kept_digests  # every unreferenced file was deleted (the orphan too)
    ledger = sorted(t.checkpoint_id for t in f.ledger.list())
    assert ledger == [3, 13, 14, 15, 16]  # old finished epochs gone; the savepoint's kept
    for cid in (3, 13, 14, 16):  # the kept checkpoints still restore
        materialize_checkpoint(f.store, f.store.get(cid), tmp_path / f"restore-{cid}")
    assert main(["retain", str(spec_path), "--json"]) == 0  # a second run has nothing to do
    assert json.loads(capsys.readouterr().out)["bytes_freed"] == 0


def test_incomplete_checkpoints_go_after_the_timeout(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    f = CheckpointFactory(tmp_path, ledger_sink=False, timeout=5.0)
    f.take(2)
    f.clock.t += 1.0
    f.coordinator.tick()  # checkpoint 3 triggered, its barrier never comes
    f.clock.t += 6.0
    f.coordinator.tick()
    assert [r.checkpoint_id for r in f.store.failures()] == [3]
    spec = make_spec(tmp_path, checkpoint={"retained": 1, "timeout": "5s"})
    plan = retain(spec, f.store, dry_run=True)
    assert plan.incomplete == [] and plan.checkpoints == [1]  # failed 5 s ago: newer than any completed
    later = datetime.now(UTC) + timedelta(seconds=10)
    plan = retain(spec, f.store, now=lambda: later)
    assert plan.incomplete == [3] and not f.store.objects.list("chk-3/")
    (tmp_path / "checkpoints" / "chk-1").mkdir(exist_ok=True)
    (tmp_path / "checkpoints" / "chk-1" / "stray").write_bytes(b"x")  # no manifest, older than 2
    assert retain(spec, f.store).incomplete == [1]


class BlockingStore(LocalObjectStore):
    """Blocks after storing the first shared file until released."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stored_one = threading.Event()
        self.release = threading.Event()
        self.armed = False

    def put_file(self, key: str, local_path: str, sha256: str | None = None) -> None:
        super().put_file(key, local_path, sha256)
        if self.armed and key.startswith("shared/") and not self.stored_one.is_set():
            self.stored_one.set()
            assert self.release.wait(10)


def test_retention_during_an_upload_keeps_the_new_checkpoints_files(tmp_path: Path) -> None:
    objects = BlockingStore(tmp_path / "checkpoints")
    f = CheckpointFactory(tmp_path, objects=objects)
    f.take(3)
    spec = make_spec(tmp_path, checkpoint={"retained": 1})
    objects.armed = True
    cid = f.trigger_and_barrier()  # checkpoint 4: the upload starts and blocks after one file
    assert objects.stored_one.wait(10)
    plan = retain(spec, f.store)  # runs while checkpoint 4 is in flight
    assert plan.checkpoints == [1, 2] and plan.kept == [3] and plan.shared
    objects.release.set()
    f.finish()
    manifest = f.store.get(cid)
    restored = materialize_checkpoint(f.store, manifest, tmp_path / "restored")  # sha256 checked
    assert restored.files == len(manifest.files)
    assert verify_checkpoints(make_spec(tmp_path), f.store, [cid])[0].passed
    assert not (tmp_path / "checkpoints" / "_inflight").exists() or not list(
        (tmp_path / "checkpoints" / "_inflight").iterdir())  # released after the manifest


def test_the_uploader_waits_for_a_running_retention_and_relists(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "s")
    watch = RetentionRunWatch(objects, poll=0.01)
    assert watch.wait_out_retention() is True  # the first call: list shared/
    assert watch.wait_out_retention() is False
    run = begin_run(objects)
    crossed: list[bool] = []
    waiter = threading.Thread(target=lambda: crossed.append(watch.wait_out_retention()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not crossed  # still waiting for the retention run
    end_run(objects, run)
    waiter.join(5)
    assert crossed == [True] and not objects.exists(RUNNING_KEY)
    stale = RetentionRunWatch(objects, stale_after=0.0, poll=0.01)
    begin_run(objects)  # a crashed run's flag is ignored once stale
    assert stale.wait_out_retention() is True


def test_a_retention_run_whose_process_is_gone_is_ended_by_the_uploader_at_once(tmp_path: Path) -> None:
    """A driver killed while its own retention deleted leaves its announcement; the next
    uploader of this host ends it (and re-lists shared/) instead of waiting it out for
    STALE_RUN_SECONDS. A run of a live process is still waited for."""
    objects = LocalObjectStore(tmp_path / "s")
    watch = RetentionRunWatch(objects, poll=0.01)
    assert watch.wait_out_retention() is True
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead_id = run_owner_id().replace(f"-{os.getpid()}-", f"-{gone.pid}-")
    assert owner_gone(dead_id) and not owner_gone(run_owner_id()) and not owner_gone("retain-abc")
    begin_run(objects, run_id=dead_id)
    crossed: list[bool] = []
    waiter = threading.Thread(target=lambda: crossed.append(watch.wait_out_retention()), daemon=True)
    waiter.start()
    waiter.join(30)  # ends at once; a wait for staleness would take 600 s
    assert crossed == [True] and not objects.exists(RUNNING_KEY)

    live = begin_run(objects, run_id=run_owner_id())  # this process: alive
    waiter = threading.Thread(target=lambda: crossed.append(watch.wait_out_retention()), daemon=True)
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    end_run(objects, live)
    waiter.join(5)
    assert crossed == [True, True]


def test_store_size_stays_bounded_over_60_checkpoints_with_retention(tmp_path: Path) -> None:
    f = CheckpointFactory(tmp_path, snapshot_every=5)
    spec = make_spec(tmp_path, checkpoint={"retained": 3})
    root = tmp_path / "checkpoints"
    sizes = []
    for _ in range(60):
        f.take(1)
        retain(spec, f.store)
        sizes.append(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()))
    assert len(f.store.checkpoint_ids()) == 3 and f.store.checkpoint_ids()[-1] == 60
    # Stopped growing (slack: JSON documents vary by a few bytes with their timestamps).
    assert max(sizes[30:]) <= max(sizes[10:30]) + 256
    assert len(f.ledger.list()) <= 4
    for cid in f.store.checkpoint_ids():
        materialize_checkpoint(f.store, f.store.get(cid), tmp_path / f"r{cid}")


def test_a_table_sinks_cut_records_go_with_their_checkpoints(tmp_path: Path) -> None:
    """Retention deletes the cut record of every checkpoint it deletes, and a record a killed run
    left without its checkpoint; it keeps the records of kept checkpoints and any record newer
    than the newest completed checkpoint."""
    f = CheckpointFactory(tmp_path)
    spec = make_spec(tmp_path, checkpoint={"retained": 2})
    f.take(5)
    cuts = CutLog(f.store.objects)
    for cid in (0, 1, 2, 3, 4, 5, 9):  # 0: an orphan (no such checkpoint); 9: newer than any
        cuts.record(cid, {})
    plan = retain(spec, f.store)
    assert plan.kept == [4, 5] and f.store.checkpoint_ids() == [4, 5]
    assert cuts.checkpoints() == [4, 5, 9]
    assert retain(spec, f.store).keys["checkpoints"] == []  # nothing left to delete


def test_savepoints_are_listed_and_survive_retention(tmp_path: Path, capsys) -> None:
    f = CheckpointFactory(tmp_path, ledger_sink=False)
    f.take(2)
    spec_path = write_spec(tmp_path, spec_dict(tmp_path, checkpoint={"retained": 1}))
    assert main(["savepoint", str(spec_path)]) == 0
    assert "checkpoint 2 of t is a savepoint" in capsys.readouterr().out
    f.take(3)
    assert main(["retain", str(spec_path)]) == 0
    capsys.readouterr()
    assert main(["checkpoints", "list", str(spec_path)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows if row[0].isdigit()] == ["2", "5"]  # the cuts, each with its stage's row
    assert [row[1] for row in rows if row[0] == "t"] == ["savepoint", "checkpoint"]
    f.shared_path(f.store.get(5), "metadata").unlink()  # a broken checkpoint cannot become a savepoint
    assert main(["savepoint", str(spec_path), "--checkpoint", "5"]) == 2
    assert "fails verification" in capsys.readouterr().err


def test_retention_keeps_the_upgrade_history_and_the_savepoints_it_names(tmp_path: Path, capsys) -> None:
    f = CheckpointFactory(tmp_path, ledger_sink=False)
    f.take(4)
    spec_path = write_spec(tmp_path, spec_dict(tmp_path, checkpoint={"retained": 1}))
    for cid in (2, 4):  # S, and savepoint R an upgrade rewrote from it
        f.store.promote(cid, CheckpointKind.SAVEPOINT)
    base = UpgradeRecord(pipeline="t", spec="t.yaml", new_spec="t-new.yaml", new_spec_sha256="0" * 64,
                         step=UpgradeStep.REPORT, source_savepoint=2, savepoint=4)
    write_record(f.objects, base, UpgradeStep.ROLLED_BACK, failure="sink_counts: 1 row missing")
    f.store.begin_attempt([3, 4], restored=2)  # the rollback abandons the canary's checkpoints and R
    write_record(f.objects, base.model_copy(update={"savepoint": 2}), UpgradeStep.CANARY_PASSED)
    write_record(f.objects, base.model_copy(update={"source_savepoint": 4, "savepoint": 4}),
                 UpgradeStep.CANARY_RUNNING)  # the current one, unfinished
    f.take(3)
    store_root = tmp_path / "checkpoints"
    upgrades = {k: v for k, v in _listing(store_root).items() if k.startswith(("_upgrades/", "_upgrade.json"))}
    assert len(upgrades) == 3  # two kept upgrades and the current record

    assert main(["retain", str(spec_path), "--json"]) == 0
    real = json.loads(capsys.readouterr().out)
    assert real["savepoints"] == [2, 4] and real["kept"] == [7] and real["deleted"]["checkpoints"] == [1, 3, 5, 6]
    after = _listing(store_root)
    assert {k: after.get(k) for k in upgrades} == upgrades  # the history and the current record, untouched
    assert f.store.checkpoint_ids(include_abandoned=True) == [2, 4, 7]  # R too, though the rollback abandoned it
    materialize_checkpoint(f.store, f.store.get(4), tmp_path / "restore-4")  # and it still restores
    assert [u.record.savepoint for u in recorded_upgrades(f.objects) if u.record] == [4, 2, 4]


class RetainingStore(LocalObjectStore):
    """Runs ``on_first_size`` the first time the size of a shared file is asked: a retention
    run that starts while verification is checking the checkpoint's files."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.on_first_size: Callable[[], object] | None = None

    def size(self, key: str) -> int:
        hook, self.on_first_size = self.on_first_size, None
        if hook is not None and key.startswith("shared/"):
            hook()
        return super().size(key)


def test_verification_racing_retention_reports_no_false_damage(tmp_path: Path) -> None:
    objects = RetainingStore(tmp_path / "checkpoints")
    f = CheckpointFactory(tmp_path, objects=objects)
    f.take(4)
    spec = make_spec(tmp_path, checkpoint={"retained": 1})
    objects.on_first_size = lambda: retain(spec, f.store)  # deletes 1-3 while 1 is being verified
    reports = verify_checkpoints(make_spec(tmp_path), f.store, [1, 2, 3, 4])
    assert [(r.checkpoint_id, r.passed) for r in reports] == [(4, True)]
    assert not list((tmp_path / "checkpoints").glob("chk-[123]/*")), "nothing stored for a deleted checkpoint"


def test_ledger_keeps_committed_output_a_kept_checkpoint_would_replay(tmp_path: Path) -> None:
    """An epoch committed on an abandoned timeline whose output lies ahead of a kept
    checkpoint stays in the ledger, however old its id: restoring that checkpoint replays
    those batches and needs the transaction to suppress their output."""
    from datetime import UTC, datetime

    from barrierflow.transactions.ledger import Transaction

    f = CheckpointFactory(tmp_path)
    f.take(6)
    spec = make_spec(tmp_path, checkpoint={"retained": 2})
    oldest_kept = f.store.get(5).barrier_offsets["events"]
    behind = dict(oldest_kept)
    beyond = {p: v + 1000 for p, v in oldest_kept.items()}
    now = datetime.now(UTC)
    for cid, end in ((1, beyond), (2, behind), (3, behind)):
        f.ledger.put(Transaction(pipeline="t", sink="old", sink_type="parquet", transaction_id=f"old-{cid}",
                                 checkpoint_id=cid, attempt=0, batches=[cid], state=TxnState.COMMITTED,
                                 created_at=now, updated_at=now, batch_ends={cid: end}))
    retain(spec, f.store)
    assert [t.checkpoint_id for t in f.ledger.list("old")] == [1, 3]  # 3: the newest committed of its sink
