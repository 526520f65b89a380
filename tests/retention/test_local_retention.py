"""Retention of the job's local work directory (barrierflow.retention.local) on hand-built
Spark checkpoint directories in Spark 4's on-disk format, plus one real-Spark restart check."""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from barrierflow.checkpointing.manifest import FailureReason, FailureRecord, Manifest
from barrierflow.checkpointing.snapshot import select_files
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.retention.local import apply_local_retention, min_batches_to_retain, plan_local_retention
from barrierflow.retention.plan import retain
from barrierflow.storage.local import LocalObjectStore
from barrierflow.workdir.layout import JobLayout

from tests.pipeline_specs import make_spec, spec_dict, write_spec

PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
LATEST = 229  # latest committed batch of the hand-built checkpoint
SNAPSHOTS = (50, 100, 150, 200)


def _crc(path: Path) -> None:
    """Hadoop's ChecksumFileSystem sidecar ``.<name>.crc`` (content irrelevant here)."""
    (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00\x00\x02\x00" + bytes(5))


class HandBuiltSparkCheckpoint:
    """A local Spark checkpoint as Spark 4 writes it for a stateful query over one source:
    ``metadata``, ``offsets/V`` (version line, batch metadata line, source offset line),
    ``commits/V``, HDFSBackedStateStore ``state/0/<p>/<v>.delta|.snapshot`` and schema /
    operator metadata files, every file with its ``.<name>.crc`` sidecar."""

    def __init__(self, root: Path, partitions: int = 3) -> None:
        self.root = root
        self.partitions = partitions
        for sub in ("offsets", "commits", "sources/0"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._write(root / "metadata", '{"id":"0b9d1c2e-6f7a-4d0e-9a51-3c8f2b7e4d10"}')
        self._write(root / "state" / "0" / "_metadata" / "metadata", '{"operatorInfo":{"operatorId":0}}')
        for p in range(partitions):
            self._write(self.part(p) / "_metadata" / "schema", "v2\n{\"type\":\"struct\"}")

    def part(self, p: int) -> Path:
        return self.root / "state" / "0" / str(p)

    def _write(self, path: Path, text: str | bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        _crc(path)

    def plan_batch(self, batch: int, barrier: int) -> None:
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1767225600000 + batch * 100,
                "conf": {"spark.sql.streaming.stateStore.providerClass": PROVIDER,
                         "spark.sql.shuffle.partitions": str(self.partitions)}}
        source = {"partitions": {"0": 10 * (batch + 1), "1": 10 * (batch + 1)}, "barrier": barrier}
        self._write(self.root / "offsets" / str(batch), f"v1\n{json.dumps(meta)}\n{json.dumps(source)}")

    def run_batch(self, batch: int, barrier: int, partitions: range | None = None) -> None:
        """Plan batch V, commit state version V+1 in every partition, then ``commits/V``."""
        self.plan_batch(batch, barrier)
        for p in partitions if partitions is not None else range(self.partitions):
            self._write(self.part(p) / f"{batch + 1}.delta", bytes([batch % 256, p]) * 40)
        self._write(self.root / "commits" / str(batch), 'v1\n{"nextBatchWatermarkMs":0}')

    def write_snapshot(self, version: int, p: int) -> None:
        self._write(self.part(p) / f"{version}.snapshot", bytes([version % 256, p, 9]) * 100)


def build_work_dir(work: Path, barrier_every: int = 10) -> HandBuiltSparkCheckpoint:
    """Batches 0..LATEST committed (barrier of checkpoint n in batch 10n), batch LATEST+1
    planned and running (only partition 0 committed its state), snapshots every 50 versions,
    a temporary file of Spark's atomic writer, and partition 2 missing delta 150."""
    spark = HandBuiltSparkCheckpoint(work / "spark-checkpoint")
    for batch in range(LATEST + 1):
        spark.run_batch(batch, barrier=batch // barrier_every)
    spark.plan_batch(LATEST + 1, barrier=(LATEST + 1) // barrier_every)
    (spark.part(0) / f"{LATEST + 2}.delta").write_bytes(b"in-flight")
    (spark.root / "offsets" / f".{LATEST + 1}.3f1c.tmp").write_bytes(b"partial")
    for version in SNAPSHOTS:
        for p in range(spark.partitions):
            spark.write_snapshot(version, p)
    (spark.part(2) / "150.delta").unlink()
    (spark.part(2) / ".150.delta.crc").unlink()
    return spark


def manifest(cid: int, batch: int, state_bases: dict[str, int], *, completed: datetime, attempt: int = 0,
             pipeline: str = "t") -> Manifest:
    """A completed checkpoint's manifest as the coordinator writes it (no files: the store
    side is not under test here)."""
    return Manifest(
        pipeline=pipeline, checkpoint_id=cid, attempt=attempt, spark_batch_id=batch, first_batch_id=batch - 9,
        state_version=batch + 1, barrier_offsets={"events": {"0": 10 * (batch + 1), "1": 10 * (batch + 1)}},
        max_event_time={"events": {"0": None, "1": None}}, trigger_time=completed - timedelta(seconds=2),
        barrier_time=completed - timedelta(seconds=1), completion_time=completed, barrier_batch_ms=1.0, sync_ms=1.0,
        async_ms=1.0, total_ms=2000.0, full_bytes=0, incremental_bytes=0, files=[], state_bases=state_bases,
    )


def record_failure(store: CheckpointStore, cid: int, when: datetime) -> None:
    store.record_failure(FailureRecord(pipeline="t", checkpoint_id=cid, reason=FailureReason.UPLOAD_FAILED,
                                       message="test", trigger_time=when - timedelta(seconds=1), failure_time=when))


def _listing(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def _staging(work: Path, cid: int) -> None:
    """A synchronous-phase staging directory as take_local_snapshot leaves it."""
    target = work / "snapshots" / f"chk-{cid}"
    (target / "offsets").mkdir(parents=True)
    (target / "offsets" / "0").write_text("v1\n{}\n{}")
    (target / "state" / "0" / "0").mkdir(parents=True)
    (target / "state" / "0" / "0" / "1.delta").write_bytes(b"d" * 30)


def with_sidecars(*paths: str) -> set[str]:
    out = set()
    for path in paths:
        head, _, name = path.rpartition("/")
        out |= {path, f"{head}/.{name}.crc" if head else f".{name}.crc"}
    return out


def test_deletes_exactly_what_spark_can_never_need_and_dry_run_reports_the_same(tmp_path: Path, capsys) -> None:
    work = tmp_path / "work"
    spark = build_work_dir(work)
    now = datetime.now(UTC)
    store = CheckpointStore(LocalObjectStore(tmp_path / "checkpoints"), "t")
    # Checkpoints 20..22 closed batches 200, 210, 220; bases chosen as the coordinator does.
    for cid in (20, 21, 22):
        _, bases = select_files(spark.root, 10 * cid, 10 * cid - 9)
        store.write_manifest(manifest(cid, 10 * cid, bases, completed=now - timedelta(minutes=30 - cid)))
    assert bases == {"state/0/0": 200, "state/0/1": 200, "state/0/2": 200}
    record_failure(store, 19, now - timedelta(hours=1))
    for cid in (19, 21, 27, 28):  # 27: the newest recorded id (fails below); 28: in flight
        _staging(work, cid)
    (work / "snapshots" / "not-a-checkpoint").mkdir()
    aside = work / "spark-checkpoint.replaced"
    shutil.copytree(spark.root / "state", aside / "state")  # moved aside by a restore an hour ago
    old = time.time() - 3600
    for p in [aside, *aside.rglob("*")]:
        os.utime(p, (old, old))
    (work / "job.lease").write_text('{"pid": 1, "host": "elsewhere", "started_at": "2026-01-01T00:00:00+00:00"}')
    # The ctime of the copied files is now: only a checkpoint completed after it counts.
    after = datetime.now(UTC) + timedelta(seconds=1)
    _, bases = select_files(spark.root, 225, 221)
    store.write_manifest(manifest(25, 225, bases, completed=after))
    store.write_manifest(manifest(26, 226, bases, completed=after))
    record_failure(store, 27, datetime.now(UTC))
    spec_path = write_spec(tmp_path, spec_dict(tmp_path, checkpoint={"retained": 2}))
    before = _listing(work)

    assert main(["retain", str(spec_path), "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)["stages"]["t"]["local"]
    assert _listing(work) == before  # the dry run deleted nothing

    assert main(["retain", str(spec_path), "--json"]) == 0
    real = json.loads(capsys.readouterr().out)["stages"]["t"]["local"]
    assert real == dry
    after = _listing(work)
    deleted = set(before) - set(after)
    assert set(after) - set(before) == set()

    # min(B = 226, L - M = 229 - 100) = 129: offsets/commits 0..128 go, with their sidecars.
    expected = with_sidecars(*(f"spark-checkpoint/{log}/{b}" for log in ("offsets", "commits") for b in range(129)))
    # State: window start L + 1 - M = 130 -> newest snapshot S = 100; bases 200: versions < 100
    # go in partitions 0 and 1; partition 2 misses delta 150 of the chain from 100, so it is kept.
    for p in (0, 1):
        expected |= with_sidecars(*(f"spark-checkpoint/state/0/{p}/{v}.delta" for v in range(1, 100)),
                                  f"spark-checkpoint/state/0/{p}/50.snapshot")
    expected |= {k for k in before if k.startswith("spark-checkpoint.replaced/")}
    expected |= {k for k in before if k.startswith(("snapshots/chk-19/", "snapshots/chk-21/"))}
    assert deleted == expected
    assert real["bytes_freed"] == sum(before[k] for k in deleted)
    assert real["deleted"] == {"offsets": 129, "commits": 129, "state_files": 200, "replaced": True,
                               "staging": [19, 21]}
    assert real["files"] == len(deleted)
    assert (real["latest_committed_batch"], real["barrier_batch"], real["prune_below_batch"]) == (229, 226, 129)
    assert any("state/0/2" in note for note in real["notes"])

    # Kept: the latest batches and the newest chains, the in-flight batch, Spark's other files.
    root = spark.root
    for b in (129, 228, 229):
        assert (root / "offsets" / str(b)).is_file() and (root / "commits" / str(b)).is_file()
    assert (root / "offsets" / "230").is_file() and (root / "offsets" / ".230.3f1c.tmp").is_file()
    for p in range(3):
        for version in (100, 150, 200):
            assert (spark.part(p) / f"{version}.snapshot").is_file()
        assert all((spark.part(p) / f"{v}.delta").is_file() for v in range(100, 231) if (p, v) != (2, 150))
        assert (spark.part(p) / "_metadata" / "schema").is_file()
    assert (spark.part(2) / "1.delta").is_file() and (spark.part(2) / "50.snapshot").is_file()
    assert (root / "metadata").is_file() and (root / "state" / "0" / "_metadata" / "metadata").is_file()
    # What a restart at batch 230 and the next synchronous phase need is still there.
    rel, _ = select_files(root, 229, 226, {"state/0/0": 200, "state/0/1": 200})
    assert all((root / r).is_file() for r in rel)
    # Staging of the newest recorded (27) and in-flight (28) checkpoints and foreign dirs stay.
    assert sorted(p.name for p in (work / "snapshots").iterdir()) == ["chk-27", "chk-28", "not-a-checkpoint"]
    assert (work / "job.lease").is_file()

    assert main(["retain", str(spec_path), "--json"]) == 0  # a second run has nothing left to do
    again = json.loads(capsys.readouterr().out)["stages"]["t"]["local"]
    assert again["files"] == 0 and again["bytes_freed"] == 0

    assert main(["retain", str(spec_path)]) == 0  # the text output names the work dir's numbers
    text = capsys.readouterr().out
    assert f"work dir {work}: deleted 0 offsets and 0 commits entries, 0 state files" in text


def test_older_barrier_and_missing_bases_bound_the_deletion(tmp_path: Path) -> None:
    work = tmp_path / "work"
    spark = build_work_dir(work)
    store = CheckpointStore(LocalObjectStore(tmp_path / "checkpoints"), "t")
    _, bases = select_files(spark.root, 80, 71)
    assert bases["state/0/0"] == 50
    del bases["state/0/1"]  # e.g. a manifest that recorded no base for this directory
    store.write_manifest(manifest(8, 80, bases, completed=datetime.now(UTC)))
    spec = make_spec(tmp_path)
    before = _listing(work)

    plan = retain(spec, store)
    assert plan.local is not None and plan.local.prune_below == 80  # the barrier batch binds
    deleted = set(before) - set(_listing(work))
    expected = with_sidecars(*(f"spark-checkpoint/{log}/{b}" for log in ("offsets", "commits") for b in range(80)))
    # Partition 0: base 50 < S = 100 binds; partition 1: no base (kept); partition 2: chain gap (kept).
    expected |= with_sidecars(*(f"spark-checkpoint/state/0/0/{v}.delta" for v in range(1, 50)))
    assert deleted == expected
    assert (spark.part(0) / "50.snapshot").is_file() and (spark.part(1) / "1.delta").is_file()
    assert any("state/0/1: no state base" in note for note in plan.local.notes)
    assert plan.local.replaced is False and plan.local.staging == []


def test_replaced_copy_and_staging_wait_for_the_job_to_move_on(tmp_path: Path) -> None:
    work = tmp_path / "work"
    spark = build_work_dir(work)
    store = CheckpointStore(LocalObjectStore(tmp_path / "checkpoints"), "t")
    aside = work / "spark-checkpoint.replaced"
    shutil.copytree(spark.root / "commits", aside / "commits")
    _, bases = select_files(spark.root, 220, 211)
    store.write_manifest(manifest(22, 220, bases, completed=datetime.now(UTC) - timedelta(hours=1)))
    record_failure(store, 23, datetime.now(UTC))
    _staging(work, 23)
    spec = make_spec(tmp_path, checkpoint={"timeout": "60s"})

    plan = retain(spec, store)  # the newest checkpoint completed before the restore moved it aside
    assert plan.local is not None and not plan.local.replaced and aside.is_dir()
    assert any("spark-checkpoint.replaced kept" in n for n in plan.local.notes)
    assert plan.local.staging == [] and (work / "snapshots" / "chk-23").is_dir()  # newest recorded, fresh
    later = datetime.now(UTC) + timedelta(seconds=61)
    plan = retain(spec, store, now=lambda: later)  # the newest recorded id, but older than the timeout
    assert plan.local is not None and plan.local.staging == [23] and not (work / "snapshots" / "chk-23").exists()
    assert not plan.local.replaced

    after = datetime.now(UTC) + timedelta(seconds=1)  # completed after the aside copy last changed
    store.begin_attempt([])  # a later restore: attempt 1; a checkpoint of attempt 0 proves nothing
    store.write_manifest(manifest(24, 226, bases, completed=after, attempt=0))
    assert not retain(spec, store).local.replaced  # type: ignore[union-attr]
    store.write_manifest(manifest(25, 227, bases, completed=after, attempt=1))
    plan = retain(spec, store)
    assert plan.local is not None and plan.local.replaced and not aside.exists()
    assert sorted(p.name for p in work.iterdir()) == ["snapshots", "spark-checkpoint"]  # no tombs left


def test_a_directory_replaced_after_planning_is_not_deleted(tmp_path: Path) -> None:
    work = tmp_path / "work"
    spark = build_work_dir(work)
    store = CheckpointStore(LocalObjectStore(tmp_path / "checkpoints"), "t")
    aside = work / "spark-checkpoint.replaced"
    (aside / "commits").mkdir(parents=True)
    (aside / "commits" / "0").write_text("old")
    _, bases = select_files(spark.root, 220, 211)
    store.write_manifest(manifest(22, 220, bases, completed=datetime.now(UTC) + timedelta(seconds=1)))
    plan = retain(make_spec(tmp_path), store, dry_run=True)
    assert plan.local is not None and plan.local.replaced
    shutil.rmtree(aside)  # a restore runs meanwhile and moves a newer checkpoint aside
    (aside / "commits").mkdir(parents=True)
    (aside / "commits" / "7").write_text("new")
    apply_local_retention(plan.local)
    assert (aside / "commits" / "7").read_text() == "new"
    assert sorted(p.name for p in work.iterdir()) == ["spark-checkpoint", "spark-checkpoint.replaced"]


def test_missing_work_dir_or_spark_checkpoint_is_a_note(tmp_path: Path, capsys) -> None:
    store = CheckpointStore(LocalObjectStore(tmp_path / "checkpoints"), "t")
    store.write_manifest(manifest(1, 10, {}, completed=datetime.now(UTC)))
    spec_path = write_spec(tmp_path, spec_dict(tmp_path))  # work dir tmp_path/work does not exist
    assert main(["retain", str(spec_path), "--json"]) == 0
    local = json.loads(capsys.readouterr().out)["stages"]["t"]["local"]
    assert local["skipped"] == f"work directory {tmp_path / 'work'} does not exist on this machine"
    assert local["files"] == 0 and local["bytes_freed"] == 0
    assert main(["retain", str(spec_path)]) == 0
    assert "does not exist on this machine" in capsys.readouterr().out

    (tmp_path / "work").mkdir()
    plan = retain(make_spec(tmp_path), store)
    assert plan.local is not None and plan.local.skipped is None and plan.local.file_count == 0
    assert plan.local.notes == [f"no local Spark checkpoint at {tmp_path / 'work' / 'spark-checkpoint'}"]


def test_min_batches_to_retain_is_never_below_sparks() -> None:
    key = "spark.sql.streaming.minBatchesToRetain"
    assert min_batches_to_retain({}) == 100
    assert min_batches_to_retain({key: "500"}) == 500
    assert min_batches_to_retain({key: "10"}) == 100  # the session applies 100 over the spec's 10
    assert min_batches_to_retain({key: "many"}) is None and min_batches_to_retain({key: "0"}) is None


def test_real_spark_restarts_from_a_pruned_checkpoint(spark: Any, tmp_path: Path) -> None:
    """Spark writes the checkpoint (keeping everything: minBatchesToRetain 100); retention
    with minBatchesToRetain 3 prunes it; Spark then resumes from it with exact counts."""
    session = spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", "2")
    session.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
    session.conf.set("spark.sql.streaming.stateStore.maintenanceInterval", "200ms")
    inbox = tmp_path / "in"
    inbox.mkdir()
    layout = JobLayout(tmp_path / "work")

    def run(first: int, last: int, retain_batches: int) -> dict[int, int]:
        for i in range(first, last):
            (inbox / f"f{i:03}.json").write_text("".join(json.dumps({"k": j % 3}) + "\n" for j in range(i + 1)))
        session.conf.set("spark.sql.streaming.minBatchesToRetain", str(retain_batches))
        name = f"counts_{first}"
        query = (session.readStream.schema("k INT").option("maxFilesPerTrigger", 1).json(str(inbox))
                 .groupBy("k").count().writeStream.outputMode("complete").format("memory").queryName(name)
                 .option("checkpointLocation", str(layout.spark_checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        return {r["k"]: r["count"] for r in session.table(name).collect()}

    run(0, 8, 100)  # batches 0..7
    root = layout.spark_checkpoint
    assert sorted(int(n) for n in os.listdir(root / "offsets") if n.isdigit()) == list(range(8))
    assert (root / "offsets" / ".0.crc").is_file()  # the sidecar naming this module relies on
    _, bases = select_files(root, 7, 0)
    before = _listing(layout.work_dir)
    plan = plan_local_retention(layout, [manifest(1, 7, bases, completed=datetime.now(UTC))], [1],
                                min_batches=3, attempt=0, timeout=timedelta(minutes=1), now=datetime.now(UTC))
    apply_local_retention(plan)
    deleted = set(before) - set(_listing(layout.work_dir))
    assert plan.offsets == plan.commits == [0, 1, 2, 3]  # < L - M = 4: what Spark's purge would drop
    logs = {k for k in deleted if k.startswith(("spark-checkpoint/offsets/", "spark-checkpoint/commits/"))}
    assert logs == with_sidecars(*(f"spark-checkpoint/{log}/{b}" for log in ("offsets", "commits") for b in range(4)))
    assert all(k.startswith("spark-checkpoint/state/0/") for k in deleted - logs)  # nothing else of Spark's
    counts = run(8, 10, 3)  # resumes at batch 8 from the pruned checkpoint
    assert counts == {k: sum(len(range(k, i + 1, 3)) for i in range(10)) for k in range(3)}
