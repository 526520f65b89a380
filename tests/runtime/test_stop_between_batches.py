"""A run's stop waits for the micro-batch in flight: the batch writing ahead when the stop comes
ends (Spark commits it), instead of being interrupted inside its Spark job; and no batch is
planned after it, so the stop never interrupts the planning step (the write of a batch's
offset-log entry, whose temp file and JVM descriptor an interrupt leaves behind).

The pace is the test's: at the write-ahead of the first micro-batch after the run's last
checkpoint completed (fault point ``mid_epoch``, inside the stage's micro-batch writer), the batch
waits until the stop has held the stage's input (the run loop stops once that checkpoint
completed), then writes ahead. Interrupted there, the
write-ahead's Spark job is cancelled and that batch never reaches Spark's commit log. The trigger
is ``0s`` with input waiting, so batches follow each other without a gap: the stop waits for
the one in flight, not for a gap that never comes; and without the input held, the next batch's
planning starts the moment the batch in flight ends, where the stop would interrupt it.

A batch longer than the stop's wait is interrupted; the stop returns only once the interrupted
batch's tasks ended, so the driver's next query does not share the cores with them: in a
pipeline of one stage, and of two whose second stage is the one blocked. There the batch blocks
in a Python UDF until the test releases it (never): Spark's kill ends the task only when it
destroys the UDF's worker, seconds after ``query.stop()`` returned.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.barriers.control import ControlChannel
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.faults import at_point
from barrierflow.runtime import stage_runner
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.runtime.stage_runner import StageRunner
from barrierflow.spark import commit_log, offset_log
from barrierflow.spark.query_tasks import active_tasks
from barrierflow.spec import load_spec
from barrierflow.spec.loader import parse_staged_spec
from barrierflow.workdir.layout import JobLayout
from pyspark.sql.streaming import StreamingQuery

from tests.scenarios.harness import FAST_JVM, windowed_spec
from tests.support.in_session_runs import run_spec, write_spec
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import two_stage_spec

pytestmark = pytest.mark.spark


def test_a_stop_lets_the_micro_batch_in_flight_end(spark: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"},
                         records=3000, per_batch=50)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["trigger"] = {"interval": "0s"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    spec = load_spec(path)
    store = CheckpointStore.for_spec(spec)
    control = ControlChannel(JobLayout.for_spec(spec).control)
    held: list[int] = []
    input_held, query_stopping, go = threading.Event(), threading.Event(), threading.Event()
    set_hold, stop = ControlChannel.set_hold, StreamingQuery.stop

    def holding(channel: ControlChannel, hold: bool) -> None:
        set_hold(channel, hold)
        if hold:  # the pipeline's one stage
            input_held.set()
            go.set()

    def stopping(query: StreamingQuery) -> None:
        query_stopping.set()
        go.set()
        stop(query)

    monkeypatch.setattr(ControlChannel, "set_hold", holding)
    monkeypatch.setattr(StreamingQuery, "stop", stopping)

    def hold(context: dict[str, object]) -> None:
        if held or not store.completed():
            return
        held.append(int(context["batch_id"]))  # type: ignore[call-overload]
        # The batch in flight goes on at the stop's first step: holding the input (what the stop
        # must do first), or stopping the query (a stop that does not hold). The order is the
        # stop's, whatever the machine's speed.
        go.wait()
        assert input_held.is_set() and not query_stopping.is_set(), "the query was stopped with the input not held"
        assert control.is_held()

    with at_point("mid_epoch", hold):
        result = run_spec(spark, path, checkpoints=1)
    assert result.completed
    assert held, "the micro-batch in flight when the run stopped never reached its write-ahead: interrupted"
    checkpoint = Path(data["work_dir"]) / "spark-checkpoint"
    committed = commit_log.committed_batches(checkpoint)
    assert held[0] in committed, f"micro-batch {held[0]}, in flight at the stop, was interrupted: {committed}"
    # held[0] + 1 only as a batch of no data (a watermark's eviction): nothing new was admitted
    assert committed[-1] <= held[0] + 1, f"the stop waited for more than the batch in flight: {committed}"
    planned = offset_log.planned_batches(checkpoint)
    assert planned[-1] == committed[-1], f"the stop interrupted batch {planned[-1]} (planned, not committed)"
    assert not [p.name for p in (checkpoint / "offsets").iterdir() if p.name.endswith(".tmp")]


def _observe_the_stop(spark: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Each stage's tasks still running when the run's stop reaches its next step (the stages'
    drains, after every query was stopped), by the stage query's run id; the stop's wait for a
    batch in flight cut to 0.2 s."""
    monkeypatch.setattr(stage_runner, "STOP_BETWEEN_BATCHES_SECONDS", 0.2)
    left: dict[str, int] = {}
    drain = StageRunner.drain

    def observed_drain(runner: StageRunner, timeout: float, *, failing: bool = False) -> None:
        assert runner.query is not None
        group = str(runner.query.runId)
        left.setdefault(group, active_tasks(spark.sparkContext, group))
        drain(runner, timeout, failing=failing)

    monkeypatch.setattr(StageRunner, "drain", observed_drain)
    return left


def _blocked_stage(tmp_path: Path) -> dict[str, Any]:
    """The transformation that holds every row until a release file that is never written."""
    return {"function": "tests.support.blocking_transforms:blocked_rows", "output_mode": "append",
            "options": {"blocked": str(tmp_path / "blocked"), "release": str(tmp_path / "release")}}


def test_a_stop_that_interrupts_a_batch_returns_once_its_tasks_ended(spark: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = write_spec(tmp_path / "pipeline.yaml", {
        "version": 1, "name": "interrupted", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": 0,
                     "max_records_per_batch": 5, "records_per_partition": 1000, "keys": 4}],
        "transformation": _blocked_stage(tmp_path),
        "sinks": [{"name": "out", "type": "discard"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "1s", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM}})
    left = _observe_the_stop(spark, monkeypatch)
    with caplog.at_level("WARNING", logger="barrierflow.runtime.stage_runner"):
        run_spec(spark, path, until=lambda _job: (tmp_path / "blocked").exists(), duration=300)
    assert "did not end within" in caplog.text, f"the stop never had to interrupt the blocked batch: {caplog.text}"
    assert len(left) == 1, f"the run's stop never reached its drain: {caplog.text}"
    assert list(left.values()) == [0], f"the stop returned with {left} task(s) of the interrupted batch running"
    assert "still run" not in caplog.text


def test_the_stop_of_a_two_stage_pipeline_returns_once_the_interrupted_stages_tasks_ended(
        spark: Any, tmp_path: Path, kafka_endpoint: KafkaEndpoint, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["stages"][1]["transformation"] = _blocked_stage(tmp_path)  # stage b blocks in the rows it reads
    data["stages"][1]["sinks"] = [{"name": "out", "type": "discard"}]
    left = _observe_the_stop(spark, monkeypatch)
    with caplog.at_level("WARNING", logger="barrierflow.runtime.stage_runner"):
        StagedPipelineJob(parse_staged_spec(data), spark=spark).driver.run(
            until=lambda: (tmp_path / "blocked").exists(), duration=300)
    assert "stage b of pipeline two: the micro-batch in flight did not end within" in caplog.text, caplog.text
    assert len(left) == 2, f"the stop reached the drains of {len(left)} stage(s): {caplog.text}"
    assert list(left.values()) == [0, 0], f"the stop returned with tasks still running: {left}"
    assert "still run" not in caplog.text
