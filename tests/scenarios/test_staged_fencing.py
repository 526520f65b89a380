"""A stalled driver of a multi-stage pipeline that wakes up after a restore is fenced off
(issue 15, item 3: a fencing number that every commit checks, for pipelines of several stages).

The old driver (the pipeline coordinator and both stages of generator -> a -> channel ab on the
test Kafka broker -> b -> Parquet through 2PC, one process) suspends itself (SIGSTOP) right
after global checkpoint 2's manifest was written, before stage b's sink was told: b's epoch 2
is pre-committed, not committed. Its lease heartbeat stops, the lease expires, and "another
host" (its own work dir; the same checkpoint store, channels and sink) restores global
checkpoint 2 (fence 2, which commits b's epoch 2) and runs a new attempt (fence 3). Once that
attempt completed a global checkpoint the old driver is resumed (SIGCONT): whatever it tries
next (commit b's epoch 2, stage a micro-batch, write a global manifest) is refused by the
fencing number; it exits 1 with the fenced-off error, having written no global manifest, stage
manifest or 2PC decision since the restore, and the committed output, after the new attempt
ran to the end, holds every source record exactly once.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main
from barrierflow.lease import JobLease, highest_fence, lease_holder
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec

from tests.scenarios.harness import FAST_JVM
from tests.scenarios.suspension import suspended_driver, wait_until
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600), pytest.mark.slow(90)]
RECORDS = 1500


def _output(out: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{out}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))


def _old_attempt_writes(job: StagedPipelineJob) -> dict[str, Any]:
    """What a driver holding fence 1 could have written: global manifests of attempt 0, stage
    manifests recorded under fence 1, and 2PC decision records carrying fence 1."""
    globals_ = {}
    for info in job.objects.list("global/"):
        if info.key.endswith("/_metadata.json"):
            doc = json.loads(job.objects.get_bytes(info.key))
            if doc["attempt"] == 0:
                globals_[info.key] = doc["checkpoint_id"]
    writers, decisions = {}, {}
    for stage in job.stages:
        objects = stage.store.objects
        writers[stage.stage.name] = sorted(o.key for o in objects.list("_writers/") if o.key.endswith(".fence-1"))
        decisions[stage.stage.name] = sorted(
            o.key for o in objects.list("ledger/") if o.key.endswith(".decision.json")
            and json.loads(objects.get_bytes(o.key)).get("fence") == 1)
    return {"globals": globals_, "stage manifests": writers, "decisions": decisions}


def test_stalled_multi_stage_driver_is_fenced_off_after_a_restore(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["stages"][0]["sources"][0]["records_per_partition"] = RECORDS
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM}
    spec_a = tmp_path / "two.yaml"
    spec_a.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    other = {**data, "work_dir": str(tmp_path / "work-host-b")}  # "another host": its own work dir
    spec_b = tmp_path / "two-host-b.yaml"
    spec_b.write_text(yaml.safe_dump(other, sort_keys=False), encoding="utf-8")
    out = tmp_path / "out"
    view = StagedPipelineJob.offline(parse_staged_spec(data))

    resumed: dict[str, Any] = {}
    # The old driver suspends itself the 2nd time a global checkpoint completes (manifest stored,
    # the final stage's sink not told).
    with suspended_driver(spec_a, "after_global_manifest", "global checkpoint", 240) as old:
        assert view.global_checkpoints() == [1, 2]
        assert highest_fence(view.objects)["fence"] == 1  # type: ignore[index]
        committed_before_restore = _output(out)

        # Its heartbeat stopped: the lease expires (TTL 2 s); another host restores global checkpoint 2.
        wait_until(lambda: lease_holder(tmp_path / "work-host-b", view.objects) is None,
                   "the stalled lease to expire", 30)
        assert main(["restore", str(spec_b), "--latest"]) == 0  # fence 2, attempt 1: commits b's epoch 2 itself
        assert highest_fence(view.objects)["fence"] == 2  # type: ignore[index]
        assert len(_output(out)) > len(committed_before_restore), "the restore did not commit b's epoch 2"
        before = _old_attempt_writes(view)
        print(f"restored after {old.elapsed():.1f} s")

        def resume_old_once_the_new_attempt_completed_a_global_checkpoint() -> None:
            wait_until(lambda: any(cid > 2 for cid in view.global_checkpoints()) or "ended" in resumed,
                  "a global checkpoint of the new attempt", 300)
            resumed["fence"] = highest_fence(view.objects)["fence"]  # type: ignore[index]
            resumed["code"] = old.resume(timeout=120)  # it goes on to commit b's epoch 2: refused by the fence
            resumed["writes"] = _old_attempt_writes(view)
            print(f"old driver ended after {old.elapsed():.1f} s")

        waker = threading.Thread(target=resume_old_once_the_new_attempt_completed_a_global_checkpoint, daemon=True)
        waker.start()
        # The new attempt (fence 3) runs to the end, holding the lease as `barrierflow run` does.
        new = StagedPipelineJob(parse_staged_spec(other), spark=spark, spec_path=str(spec_b))
        with JobLease(Path(new.work_dir), new.spec.name, "run", store=new.objects) as lease:
            new.hold(lease)
            result = new.run(until_exhausted=True, duration=300)
        resumed["ended"] = True
        waker.join(timeout=180)
        assert result.completed
        stderr = old.stderr()

    assert resumed.get("fence") == 3, resumed
    assert resumed.get("code") == 1, f"the old driver exited {resumed.get('code')}:\n{stderr[-3000:]}"
    assert f"fenced off: pipeline {data['name']} was taken over to run at " in stderr, stderr[-3000:]
    assert "(fence 3); this driver (attempt 0, fence 1) lost its lease" in stderr, stderr[-3000:]
    # None of its writes happened after the restore: no global manifest of attempt 0, no stage
    # manifest under fence 1, no 2PC decision with fence 1.
    assert resumed["writes"] == before
    assert _old_attempt_writes(view) == before
    assert _output(out) == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
