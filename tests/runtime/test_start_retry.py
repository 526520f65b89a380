"""A query that dies before its first batch because Spark's Python worker did not connect back
in time (a fixed few seconds; seen on overloaded machines) is started again, at most twice,
and only when this run planned no batch yet (so nothing is replayed or written twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from barrierflow.runtime.job import START_RETRIES, StreamingJob

from tests.checkpointing.fake_spark import FakeSparkCheckpoint
from tests.pipeline_specs import make_spec

CONNECT_BACK = RuntimeError("[STREAM_FAILED] Query terminated with exception: Python worker failed to connect back.")


class CountingStarts(StreamingJob):
    """The real decision; ``build_query`` only counts (no Spark needed for the rule)."""

    starts = 0

    def build_query(self) -> Any:
        self.starts += 1
        return f"query-{self.starts}"


def test_only_a_connect_back_failure_before_the_first_batch_starts_the_query_again(tmp_path: Path) -> None:
    job = CountingStarts(make_spec(tmp_path), spark=object())
    assert not job._restart_failed_start(None, 0)
    assert not job._restart_failed_start(RuntimeError("division by zero in the transformation"), 0)
    for attempt in range(START_RETRIES):
        assert job._restart_failed_start(CONNECT_BACK, 0), attempt
    assert not job._restart_failed_start(CONNECT_BACK, 0), "retries are bounded"
    assert job.starts == START_RETRIES and job.query == f"query-{START_RETRIES}"


def test_no_restart_once_this_run_planned_a_batch(tmp_path: Path) -> None:
    job = CountingStarts(make_spec(tmp_path), spark=object())
    FakeSparkCheckpoint(job.layout.spark_checkpoint).run_batch(0, {"0": 10, "1": 10}, barrier=0)
    assert not job._restart_failed_start(CONNECT_BACK, 0)  # batch 0 was planned after the start
    assert job._restart_failed_start(CONNECT_BACK, 1)  # it was there before this run started
