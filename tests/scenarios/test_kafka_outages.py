"""The Kafka broker stops answering for 30 s (its process is SIGSTOPped: connections hang, as
in a network partition; it keeps its data in memory and answers again after SIGCONT).

While the source reads: the source rides the outage out (``unavailable_timeout``, default
120 s): no batches are planned meanwhile, a range being read waits, checkpoints that cannot
close their epoch fail and count against ``tolerable_failed_checkpoints``; once the broker
answers, reading resumes at the same offsets. Every record must reach the output exactly once.

While the sink commits: the commit of the completed checkpoint fails while the broker does
not answer and is retried with backoff (``checkpoint.sink_commit_retries``), never skipped;
an attempt cut off mid-transaction leaves an aborted transaction that the next attempt's
``init_transactions`` fences. The output, read through the sink's commit markers, must equal
the failure-free run's rows.

These tests always start their own broker (they pause it), one for the module, also when
``BARRIERFLOW_TEST_KAFKA_BOOTSTRAP`` names a shared one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.faults import at_point
from barrierflow.kafka_io.committed_output import committed_records
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.scenarios.harness import FAST_JVM, lost_and_duplicated, window_rows, windowed_spec
from tests.support.kafka_broker import KafkaEndpoint, create_topic, own_kafka_broker, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600), pytest.mark.slow(120)]
OUTAGE_SECONDS = 30.0


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaEndpoint]:
    """The broker the tests of this module pause, one for all of them (each test resumes it
    before it ends, and creates topics of its own)."""
    with own_kafka_broker() as endpoint:
        assert endpoint.pid is not None
        yield endpoint


class Outage:
    """SIGSTOP the broker once (:meth:`begin`), SIGCONT it ``OUTAGE_SECONDS`` later."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start: float | None = None
        self.end: float | None = None
        self._timer = threading.Timer(OUTAGE_SECONDS, self._resume)

    def begin(self) -> None:
        if self.start is None:
            self.start = time.time()
            os.kill(self.pid, signal.SIGSTOP)
            self._timer.start()

    def _resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.end = time.time()

    def close(self) -> None:
        self._timer.cancel()
        os.kill(self.pid, signal.SIGCONT)
        if self.start is not None and self.end is None:
            self.end = time.time()


def _figures(result_completed: list[Any], result_failed: list[Any], outage: Outage) -> dict[str, object]:
    assert outage.start is not None and outage.end is not None, "the outage did not happen during the run"
    after = [m for m in result_completed if m.completion_time.timestamp() > outage.end]
    assert after, "no checkpoint completed after the broker came back"
    back = min(m.completion_time.timestamp() for m in after)
    during = [f for f in result_failed
              if outage.start <= f.failure_time.timestamp() <= back and f.reason.value != "JOB_STOPPED"]
    return {"checkpoints failed during the outage": len(during),
            "reasons": sorted({f.reason.value for f in during}),
            "first completed checkpoint after the broker came back (s)": round(back - outage.end, 1)}


class _Done(Exception):
    """Raised from ``on_tick`` to end a run over an unbounded source."""


def test_broker_outage_while_the_source_reads_loses_and_duplicates_nothing(
        spark, tmp_path: Path, broker: KafkaEndpoint, figures: dict[str, object]) -> None:
    topic, per_partition = f"in-{uuid.uuid4().hex[:8]}", 1500
    create_topic(broker, topic, 2)
    produce(broker, topic, [(i % 2, None, f"r{i}".encode(), None) for i in range(2 * per_partition)])
    out = tmp_path / "out"
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump({
        "version": 1, "name": f"ko{uuid.uuid4().hex[:8]}", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "kafka", "bootstrap_servers": broker.bootstrap_servers,
                     "topics": [topic], "max_records_per_batch": 40, "poll_timeout": 2.0}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"partition": "partition", "offset": "offset",
                                                   "value": "cast(value as string)"}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{out}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "300ms", "timeout": "5s",
                       "tolerable_failed_checkpoints": 30},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }))
    end = {f"{topic}:0": per_partition, f"{topic}:1": per_partition}
    outage = Outage(broker.pid)  # type: ignore[arg-type]
    job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))

    def tick(running: StreamingJob) -> None:
        coordinator = running.coordinator
        if coordinator is None:
            return
        if coordinator.completed_count >= 2:
            outage.begin()
        if outage.end is not None and any(m.barrier_offsets.get("events") == end for m in coordinator.completed):
            raise _Done

    try:
        with pytest.raises(_Done):
            job.run(duration=300, on_tick=tick)
    finally:
        outage.close()
    assert job.coordinator is not None
    measured = _figures(job.coordinator.completed, job.coordinator.failed, outage)
    read_during = [m for m in job.coordinator.completed
                   if outage.start is not None and m.completion_time.timestamp() < outage.start]
    assert read_during and read_during[-1].barrier_offsets["events"] != end, \
        "the source had read everything before the outage: it did not happen while the source read"
    table = read_committed(f"file://{out}")
    rows = sorted((r["partition"], r["offset"], r["value"]) for r in (table.to_pylist() if table is not None else []))
    reference = sorted((i % 2, i // 2, f"r{i}") for i in range(2 * per_partition))
    lost, duplicated = lost_and_duplicated(rows, reference)
    figures.update({**measured, "rows lost": lost, "rows duplicated": duplicated})
    assert (lost, duplicated) == (0, 0)


def test_broker_outage_while_the_sink_commits_retries_and_loses_and_duplicates_nothing(
        spark, tmp_path: Path, broker: KafkaEndpoint, reference_rows, figures: dict[str, object],
        caplog: pytest.LogCaptureFixture) -> None:
    records = 6000
    topic, markers = f"out-{uuid.uuid4().hex[:8]}", f"markers-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic, 1)
    create_topic(broker, markers, 1)
    spec_path = windowed_spec(tmp_path, {"name": "k", "type": "kafka", "topic": topic, "key_column": "key",
                                         "bootstrap_servers": broker.bootstrap_servers,
                                         "commit_marker_topic": markers}, records=records, per_batch=100)
    data = yaml.safe_load(spec_path.read_text())
    data["checkpoint"].update({"sink_commit_retries": 10, "sink_commit_backoff": "1s", "timeout": "10s",
                               "tolerable_failed_checkpoints": 30})
    spec_path.write_text(yaml.safe_dump(data))
    outage = Outage(broker.pid)  # type: ignore[arg-type]
    seen = {"manifests": 0}

    def stop_before_the_commit(context: dict[str, object]) -> None:  # the third completed checkpoint
        seen["manifests"] += 1
        if seen["manifests"] == 3:
            outage.begin()

    caplog.set_level(logging.WARNING, logger="barrierflow")
    try:
        with at_point("after_manifest", stop_before_the_commit):
            job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))
            result = job.run(until_exhausted=True, duration=400)
    finally:
        outage.close()
    measured = _figures(result.completed, result.failed, outage)
    failed_commits = sum(1 for r in caplog.records if "retrying" in r.getMessage().lower()
                         and "commit" in r.getMessage().lower())
    rows = window_rows([json.loads(r.value) for r in committed_records(broker.bootstrap_servers, topic, markers)])
    # The sink writes timestamps as ISO-8601 ("T"); the reference has Spark's text form.
    reference = sorted((ws.replace(" ", "T"), we.replace(" ", "T"), *rest) for ws, we, *rest in reference_rows(records))
    lost, duplicated = lost_and_duplicated(rows, reference)
    figures.update({**measured, "failed commit attempts": failed_commits, "rows lost": lost,
                    "rows duplicated": duplicated})
    assert failed_commits >= 1, "no commit attempt failed: the outage did not hit the commit"
    assert (lost, duplicated) == (0, 0)
    assert rows == reference
