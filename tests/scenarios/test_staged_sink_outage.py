"""An outage of the final stage's output store during its sink commit, in a pipeline of two stages.

Stage ``a`` (bounded generator) writes channel ``ab``; stage ``b`` projects it and commits
Parquet through the two-phase-commit sink, in its own process-local coordinator whose commits
run only after the global checkpoint completed. The output store "goes away" by making the
Parquet sink's publish (the move of a write-ahead file to its final name) raise
:class:`~barrierflow.errors.StorageError`, as an unreachable store does:

* for fewer attempts than ``checkpoint.sink_commit_retries``: the commit is retried with the
  pipeline's ``sink_commit_backoff`` doubling (the stage really got both settings: its log says
  ``attempt 1 of 4`` and waits 0.2 s, then 0.4 s), the pipeline goes on, and the committed output
  holds every source record exactly once;
* for good (more failures than retries): the run stops with a
  :class:`~barrierflow.checkpointing.errors.SinkCommitFailedError` naming the stage, the sink,
  the epoch and ``barrierflow reconcile``, its cause the sink's error naming the attempts;
  once the store answers again, starting the pipeline restores its latest global checkpoint
  (committing the transaction left pre-committed) and runs to the end: again every record
  exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.errors import SinkError, StorageError
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import ParquetFileSink, read_committed
from barrierflow.spec import parse_staged_spec

from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600)]


class StoreOutage:
    """Makes the Parquet sink's publish fail ``failures`` times (then work again), or until
    :meth:`end` when ``failures`` is None."""

    def __init__(self, failures: int | None) -> None:
        self.left = failures
        self.failed = 0
        self.over = False

    def end(self) -> None:
        self.over = True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        publish = ParquetFileSink._publish

        def failing_publish(sink: ParquetFileSink, staged_key: str, target: str) -> None:
            if not self.over and (self.left is None or self.left > 0):
                self.failed += 1
                if self.left is not None:
                    self.left -= 1
                raise StorageError(f"output store {sink.path} unreachable (injected outage, failure {self.failed})")
            publish(sink, staged_key, target)

        monkeypatch.setattr(ParquetFileSink, "_publish", failing_publish)


@pytest.fixture
def commit_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING, logger="barrierflow.transactions.two_phase")
    yield caplog


def outage_spec(tmp_path: Path, endpoint: Any, *, retries: int) -> dict[str, Any]:
    data = two_stage_spec(tmp_path, endpoint)
    data["checkpoint"].update({"sink_commit_retries": retries, "sink_commit_backoff": "200ms"})
    return data


def committed_records(tmp_path: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None, "nothing committed"
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True))


EVERY_RECORD_ONCE = [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]


@pytest.mark.slow(25)
def test_a_final_stage_rides_out_a_store_outage_shorter_than_its_commit_retries(
        spark: Any, kafka_endpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        commit_log: pytest.LogCaptureFixture) -> None:
    outage = StoreOutage(failures=2)
    outage.install(monkeypatch)
    spec = parse_staged_spec(outage_spec(tmp_path, kafka_endpoint, retries=3))

    result = StagedPipelineJob(spec, spark=spark).run(until_exhausted=True, duration=300)

    assert outage.failed == 2 and result.elapsed_seconds < 300
    messages = [r.getMessage() for r in commit_log.records]
    failed = [m for m in messages if "failed (attempt" in m]
    # Stage b's sink got the pipeline's sink_commit_retries (3: 4 attempts) and backoff (0.2 s, doubling).
    assert len(failed) == 2 and "failed (attempt 1 of 4)" in failed[0] and "failed (attempt 2 of 4)" in failed[1]
    assert "injected outage" in failed[0] and "retrying in 0.2 s" in failed[0] and "retrying in 0.4 s" in failed[1]
    assert any("on attempt 3" in m for m in messages), messages
    assert committed_records(tmp_path) == EVERY_RECORD_ONCE


@pytest.mark.slow(60)
def test_a_final_stage_stops_past_its_commit_retries_and_a_restart_commits_exactly_once(
        spark: Any, kafka_endpoint: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outage = StoreOutage(failures=None)
    outage.install(monkeypatch)
    data = outage_spec(tmp_path, kafka_endpoint, retries=1)

    # Raised by the stage's next tick, or by the drain at the end of the run when the failing
    # commit is the run's last one: either way the one error of a failed sink commit, naming
    # the stage, the sink, the epoch and the fix, with the sink's own error (its retries used up).
    with pytest.raises(SinkCommitFailedError) as stopped:
        StagedPipelineJob(parse_staged_spec(data), spark=spark).run(until_exhausted=True, duration=300)

    failed = stopped.value
    assert type(failed) is SinkCommitFailedError
    assert (failed.owner, failed.sink, failed.action) == ("stage b of pipeline two", "out", "commit")
    message = str(failed)
    epoch = failed.checkpoint_id
    assert message.startswith(f"stage b of pipeline two: sink 'out': the commit of epoch {epoch} (checkpoint "
                              f"{epoch}, completed) failed"), message
    assert "stays pre-committed" in message and "barrierflow reconcile" in message
    assert isinstance(failed.cause, SinkError) and failed.__cause__ is failed.cause
    assert "in 2 attempt(s)" in str(failed.cause) and "injected outage" in str(failed.cause)
    assert f"The sink's error: SinkError: {failed.cause}" in message
    assert outage.failed >= 2  # a later checkpoint may retry it too
    outage.end()  # the store answers again

    StagedPipelineJob(parse_staged_spec(data), spark=spark).run(until_exhausted=True, duration=300)

    assert committed_records(tmp_path) == EVERY_RECORD_ONCE
