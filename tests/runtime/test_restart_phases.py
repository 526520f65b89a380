"""A restart speaks: ``run``'s start is told step by step (``phases``: choosing and verifying a
checkpoint, restoring its files, replaying, the first batch), and the metrics address file
names the live run from before the restore begins to the run's end (shared SparkSession).

The second run of a pipeline finds no local Spark checkpoint (removed, as on a new machine), so
it restores the newest checkpoint. A stale ``metrics.json`` of a killed run (a dead port) lies
in the work dir when it starts: at every step the file must already name this run's server,
which answers.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from barrierflow.metrics import ADDRESS_FILE, read_address
from barrierflow.ops.run import StartupPhase, run
from barrierflow.pipeline.model import open_pipeline

from tests.metrics.scrape import parse, scrape, value
from tests.pipeline_specs import spec_dict, write_spec

pytestmark = pytest.mark.spark


@pytest.mark.slow(40)
def test_a_restore_reports_its_steps_and_the_metrics_file_names_the_live_run(spark: Any, tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(
        tmp_path, source={"partitions": 2, "records_per_partition": 300, "max_records_per_batch": 100},
        metrics={"port": 0}))
    pipeline = open_pipeline(path)
    work_dir = Path(pipeline.work_dir)
    first: list[StartupPhase] = []
    run(path, checkpoints=2, phases=first.append)
    assert [p.step for p in first] == ["waiting", "running"], first  # a first start restores nothing
    assert read_address(work_dir) is None  # removed at the run's end
    newest = pipeline.stages[0].store.latest()
    assert newest is not None

    shutil.rmtree(pipeline.stages[0].layout.spark_checkpoint)  # a new machine: restore from the store
    (work_dir / ADDRESS_FILE).write_text(json.dumps({"host": "127.0.0.1", "port": 1, "pid": 999999,
                                                     "url": "http://127.0.0.1:1/metrics"}))
    seen: list[tuple[StartupPhase, dict[str, object] | None, float]] = []

    def phase(step: StartupPhase) -> None:
        address = read_address(work_dir)
        attempt = -1.0
        if address is not None and address["port"] != 1:
            samples, _ = parse(scrape(str(address["url"]))[0])
            attempt = value(samples, "barrierflow_run_attempt", pipeline="t")
        seen.append((step, address, attempt))

    outcome = run(path, until_exhausted=True, phases=phase)

    assert [s.step for s, _, _ in seen] == ["choosing", "restoring", "replaying", "running"], seen
    messages = [s.message for s, _, _ in seen]
    files = len(pipeline.stages[0].store.get(newest.checkpoint_id).files)
    assert files > 0
    assert messages[1].startswith(f"restoring checkpoint {newest.checkpoint_id}: {files} files (")
    assert f"queries started from checkpoint {newest.checkpoint_id}: replaying" in messages[2]
    for step, address, attempt in seen:
        # this run's server from before the restore on, never the killed run's port
        assert address is not None and address["port"] != 1 and address["pid"] == os.getpid(), (step, address)
        assert attempt >= 0, (step, address)
    # the attempt the restore began is served once it is known
    assert seen[-1][2] == outcome.attempt > seen[0][2]
    assert read_address(work_dir) is None
