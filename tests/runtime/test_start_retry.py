"""A query that dies before its first batch because Spark's Python worker did not connect back
in time (a fixed few seconds; seen on overloaded machines) is started again, at most twice,
and only when this run planned no batch yet (so nothing is replayed or written twice). The
rule lives in the one stage runner, so it holds for a single-stage run and for every stage."""

from __future__ import annotations

from pathlib import Path

from barrierflow.pipeline.model import stage_pipeline
from barrierflow.runtime.stage_runner import START_RETRIES, StageRunner

from tests.checkpointing.fake_spark import FakeSparkCheckpoint
from tests.pipeline_specs import make_spec

CONNECT_BACK = RuntimeError("[STREAM_FAILED] Query terminated with exception: Python worker failed to connect back.")


class CountingStarts(StageRunner):
    """The real decision; starting a query only counts (no Spark needed for the rule)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(stage_pipeline(make_spec(tmp_path)).stages[0], label="pipeline test")
        self.starts = 0

        def start() -> object:
            self.starts += 1
            return f"query-{self.starts}"

        self._start = start  # type: ignore[assignment]


def test_only_a_connect_back_failure_before_the_first_batch_starts_the_query_again(tmp_path: Path) -> None:
    runner = CountingStarts(tmp_path)
    assert not runner.restart_failed_start(None)
    assert not runner.restart_failed_start(RuntimeError("division by zero in the transformation"))
    for attempt in range(START_RETRIES):
        assert runner.restart_failed_start(CONNECT_BACK), attempt
    assert not runner.restart_failed_start(CONNECT_BACK), "retries are bounded"
    assert runner.starts == START_RETRIES and runner.query == f"query-{START_RETRIES}"


def test_no_restart_once_this_run_planned_a_batch(tmp_path: Path) -> None:
    runner = CountingStarts(tmp_path)
    FakeSparkCheckpoint(runner.layout.spark_checkpoint).run_batch(0, {"0": 10, "1": 10}, barrier=0)
    assert not runner.restart_failed_start(CONNECT_BACK)  # batch 0 was planned after the start
    runner.planned_at_start = 1  # it was there before this run started
    assert runner.restart_failed_start(CONNECT_BACK)
