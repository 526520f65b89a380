"""A shortened soak (the full one is ``python -m bench --scenario soak``, docs/benchmarks.md):
checkpoints every 0.1 s with retention running in the job, as the retention DAG would.

Retention must leave exactly the shared files the retained checkpoints reference (nothing
unreferenced piles up, nothing referenced is lost: every retained checkpoint restores,
because retention told the job's uploader what it deleted), the driver's threads must not
grow, and no descriptor of the driver (the test process and its JVM, both shared with other
tests) may point into the job's store or work dir once it stopped. The store's size itself
oscillates with Spark's state maintenance (each checkpoint references the delta files since
the last state snapshot), so the short run reports it rather than bounding it; the
1,000-checkpoint bench judges it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.materialize import materialize_checkpoint
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.retention.plan import retain
from barrierflow.spec import load_spec, project_home

from bench.soak import THREAD_SLACK, run_soak, soak_spec


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


def _wait_for_no_running_tasks(spark: Any, deadline_s: float = 60.0) -> None:
    """Wait until the shared session's executors run no task. ``query.stop()`` returns once the
    query thread ended and its job was cancelled; the cancelled tasks end on their own threads
    after it (an interrupted stateful task aborts its state store, closing its open delta file,
    then reports KILLED). Only then is "no descriptor into the run" a statement about leaks."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    end = time.monotonic() + deadline_s
    while (running := sum(info.numRunningTasks() for info in tracker.getExecutorInfos())) > 0:
        assert time.monotonic() < end, f"{running} tasks still running {deadline_s} s after the job stopped"
        time.sleep(0.05)


pytestmark = [pytest.mark.spark, pytest.mark.timeout(300), pytest.mark.slow(45)]


def test_thirty_checkpoints_with_retention_keep_only_referenced_files_and_the_driver_bounded(
        spark, tmp_path: Path, figures: dict[str, object]) -> None:
    spec = soak_spec(load_spec(project_home() / "include" / "pipelines" / "bench.yaml"), tmp_path, 0.1,
                     keys=500)
    report = run_soak(spec, checkpoints=30, sample_every=10, retain_every=5, spark=spark)
    samples = report.samples
    figures.update({"store files per sample": [s.store_files for s in samples],
                    "store KiB per sample": [round(s.store_bytes / 1024) for s in samples],
                    "failed checkpoints": report.failed})
    assert report.failed == 0
    assert len(samples) >= 3, samples
    first, last = samples[0], samples[-1]
    _wait_for_no_running_tasks(spark)
    # The Python process is the pytest worker: its descriptor count includes other tests'
    # background clients (kafka-python reconnect loops) that come and go, so it is judged by
    # what the job can leak: descriptors into its store and work dir, none once it stopped.
    into_run = [link for fd in os.listdir("/proc/self/fd")
                if (link := _readlink(f"/proc/self/fd/{fd}")).startswith(str(tmp_path))]
    assert into_run == [], into_run
    # So is the JVM: it is the suite's shared session, whose descriptor count also moves with
    # what earlier tests left loaded in it (state store providers unloaded by Spark's
    # maintenance, idle Kafka consumers evicted); none of its descriptors may point into this
    # job's store or work dir once the job stopped. (The full soak, in a session of its own,
    # bounds the JVM's whole count.)
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    jvm_into_run = [link for fd in os.listdir(f"/proc/{jvm_pid}/fd")
                    if (link := _readlink(f"/proc/{jvm_pid}/fd/{fd}")).startswith(str(tmp_path))]
    assert jvm_into_run == [], jvm_into_run
    figures["JVM descriptors at checkpoints 10 and 30 (shared session)"] = (first.jvm.fds, last.jvm.fds)
    assert last.python.threads <= first.python.threads + THREAD_SLACK
    assert last.jvm.threads <= first.jvm.threads + THREAD_SLACK
    store = CheckpointStore.for_spec(spec)
    retain(spec, store)
    kept = store.checkpoint_ids()
    assert 1 <= len(kept) <= 3 and kept[-1] >= 30
    referenced = {f.sha256 for cid in kept for f in store.get(cid).files}
    stored = {o.key.rsplit("/", 1)[-1] for o in store.objects.list("shared/")}
    assert stored == referenced
    for cid in kept:
        materialize_checkpoint(store, store.get(cid), tmp_path / f"restore-{cid}")
