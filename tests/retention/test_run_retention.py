"""``barrierflow run`` applies ``checkpoint.retained`` itself as its checkpoints complete
(retention/run_retention.py), as Flink's retained checkpoints do; the retain DAG stays for
store-wide cleanup.

1. One run of a fast single-stage pipeline (shared SparkSession), ``retained: 5``, 30
   checkpoints, checkpoint 3 made a savepoint while it runs: the store ends with the savepoint
   and the newest five checkpoints, every shared file one of them references and no other, each
   of them still passing structural verification; and retention ran while the pipeline ran
   (the progress report saw checkpoints gone before the run ended), not only at its end.
2. Several stages, without Spark: the same object, on the global checkpoints of a two-stage
   pipeline, keeps whole global checkpoints; a global checkpoint still in flight below the
   newest completed one (``checkpoint.max_concurrent`` above 1) keeps its global records and
   every stage's part, and is retained like any other once it completed.

What could go wrong and is checked: checkpoints piling up during the run, a savepoint deleted,
a shared file a kept checkpoint needs deleted (or an orphan left), retention only at the end,
the part of an in-flight cut deleted in a stage, a killed run's retention announcement holding
up every upload of the next run (3: ended at the next start when its process is gone, never
when it runs or ran on another host).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.global_manifest import global_key
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.checkpointing.reservations import LAST_KEY, announced_run, begin_run
from barrierflow.ops.run import Progress, run
from barrierflow.pipeline.model import open_pipeline
from barrierflow.retention.run_retention import RunRetention
from barrierflow.retention.savepoint import take_savepoint
from barrierflow.verification.runner import verify_checkpoints

from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory
from tests.verification.test_choice import _two_stage_cuts

RETAINED, CHECKPOINTS, SAVEPOINT = 5, 30, 3


@pytest.mark.spark
@pytest.mark.slow(35)
def test_run_keeps_its_newest_retained_checkpoints_and_its_savepoints(spark: Any, tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(
        tmp_path, source={"partitions": 1, "max_records_per_batch": 100, "keys": 20}, trigger={"interval": "0ms"},
        checkpoint={"interval": "100ms", "timeout": "600s", "retained": RETAINED},
        spark={"shuffle_partitions": 1}))
    pipeline = open_pipeline(path)
    stage = pipeline.stages[0]
    store = stage.store
    seen: dict[int, list[int]] = {}  # checkpoint just completed -> the store's checkpoints then

    def at_each_checkpoint(progress: Progress) -> None:
        last = getattr(progress, "last_completed", None)
        if last is None or last in seen:
            return
        if last >= SAVEPOINT and not any(k >= SAVEPOINT for k in seen):
            take_savepoint(stage.spec, store, SAVEPOINT)  # kept among the newest five: promoted while running
        seen[last] = store.checkpoint_ids()

    outcome = run(path, checkpoints=CHECKPOINTS, progress=at_each_checkpoint, progress_every=0.0)

    newest = outcome.result.completed[-1].checkpoint_id
    assert newest >= CHECKPOINTS  # a checkpoint in flight at the stop may complete while the stage drains
    kept = store.checkpoint_ids()
    assert kept == [SAVEPOINT, *range(newest - RETAINED + 1, newest + 1)], kept
    assert store.get(SAVEPOINT).kind is CheckpointKind.SAVEPOINT
    assert all(store.get(c).kind is CheckpointKind.CHECKPOINT for c in kept[1:])
    # Reference counting: the shared files are exactly those the kept checkpoints name.
    assert store.shared_digests() == {f.sha256 for c in kept for f in store.get(c).files}
    assert all(report.passed for report in verify_checkpoints(stage.spec, store, kept)), kept
    assert not store.objects.list("_inflight/") and not store.objects.exists("_retention/running.json")
    # Retention ran while the pipeline ran: checkpoints were gone before its last one completed.
    assert any(len(ids) < last for last, ids in seen.items() if last < newest), seen


def test_a_run_keeps_whole_global_checkpoints_and_every_part_of_one_in_flight(tmp_path: Path) -> None:
    pipeline, _ = _two_stage_cuts(tmp_path, 9)
    chk = tmp_path / "chk"
    # Global checkpoints 7 and 9 are in flight (max_concurrent 2): every stage snapshotted, 8 completed first.
    held = {}
    for cid in (7, 9):
        held[cid] = (chk / global_key(cid, "_metadata")).read_bytes()
        (chk / global_key(cid, "_metadata")).unlink()
        (chk / global_key(cid, "_triggered")).write_text("{}", encoding="utf-8")
    retention = RunRetention(pipeline.cuts, pipeline.stages, retained=3)

    # The run loop's tick after global checkpoint 8 completed (the run's seventh), then the end of the run.
    retention.completed(7, [7, 9], 8)
    retention.finish(count=7, pending=[7, 9], newest=8, final=True)

    assert retention.failures == 0 and retention.plans[-1].kept == [5, 6, 8]
    assert pipeline.cuts.completed_ids() == [5, 6, 8]
    assert all((chk / global_key(cid, "_triggered")).is_file() for cid in (7, 9))  # in flight: kept
    for stage in pipeline.stages:
        assert stage.store.checkpoint_ids() == [5, 6, 7, 8, 9], stage.name

    # Global checkpoint 7 completes: the next run retains it like any other; 9 is still in flight.
    (chk / global_key(7, "_metadata")).write_bytes(held[7])
    retention = RunRetention(pipeline.cuts, pipeline.stages, retained=3)
    retention.completed(8, [9], 8)
    retention.finish(count=8, pending=[9], newest=8, final=True)

    assert pipeline.cuts.completed_ids() == [6, 7, 8]
    for stage in pipeline.stages:
        assert stage.store.checkpoint_ids() == [6, 7, 8, 9], stage.name
        kept = stage.store.checkpoint_ids()
        assert stage.store.shared_digests() == {f.sha256 for c in kept for f in stage.store.get(c).files}


def test_the_next_run_ends_the_retention_run_a_killed_run_left_announced(tmp_path: Path) -> None:
    CheckpointFactory(tmp_path).take(2)
    pipeline = open_pipeline(write_spec(tmp_path, spec_dict(tmp_path)))
    objects = pipeline.stages[0].store.objects
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                              capture_output=True, text=True).stdout)  # a process that ended (and was reaped)
    host = socket.gethostname()
    retention = RunRetention(pipeline.cuts, pipeline.stages, retained=3)
    started = datetime.now(UTC)

    for alive in (f"run-{host}-{os.getppid()}-a1", f"run-elsewhere-{gone}-a2", "0123abcd"):
        begin_run(objects, started, run_id=alive)  # a live process, another host, the retain DAG's
        assert retention.start() == [] and announced_run(objects) is not None, alive
    killed = f"run-{host}-{gone}-a3"
    begin_run(objects, started, run_id=killed)

    assert retention.start() == [killed]
    assert announced_run(objects) is None  # uploads no longer wait for it
    assert killed in objects.get_bytes(LAST_KEY).decode()  # and re-list the shared files once
