"""A run's stop waits for the micro-batch in flight: the batch writing ahead when the stop comes
ends (Spark commits it), instead of being interrupted inside its Spark job.

The pace is the test's: at the write-ahead of the first micro-batch after the run's last
checkpoint completed (fault point ``mid_epoch``, inside the stage's micro-batch writer), the batch
waits until the run loop has asked its stage to stop, then writes ahead. Interrupted there, the
write-ahead's Spark job is cancelled and that batch never reaches Spark's commit log. The trigger
is ``0s`` with input waiting, so batches follow each other without a gap: the stop waits for
the one in flight, not for a gap that never comes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.faults import at_point
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.spark import commit_log
from barrierflow.spec import load_spec

from tests.scenarios.harness import windowed_spec
from tests.support.in_session_runs import run_spec

pytestmark = pytest.mark.spark


def test_a_stop_lets_the_micro_batch_in_flight_end(spark: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"},
                         records=3000, per_batch=50)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["trigger"] = {"interval": "0s"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    store = CheckpointStore.for_spec(load_spec(path))
    stop_asked = threading.Event()
    held: list[int] = []

    wait = StageRunner._wait_between_batches

    def asked(runner: StageRunner, limit: float) -> None:
        stop_asked.set()
        wait(runner, limit)

    monkeypatch.setattr(StageRunner, "_wait_between_batches", asked)

    def hold(context: dict[str, object]) -> None:
        if held or not store.completed():
            return
        held.append(int(context["batch_id"]))  # type: ignore[call-overload]
        assert stop_asked.wait(120), "the run never stopped"

    with at_point("mid_epoch", hold):
        result = run_spec(spark, path, checkpoints=1)
    assert result.completed
    assert held, "the micro-batch in flight when the run stopped never reached its write-ahead: interrupted"
    committed = commit_log.committed_batches(Path(data["work_dir"]) / "spark-checkpoint")
    assert held[0] in committed, f"micro-batch {held[0]}, in flight at the stop, was interrupted: {committed}"
    assert committed[-1] <= held[0] + 1, f"the stop waited for more than the batch in flight: {committed}"
