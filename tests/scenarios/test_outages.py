"""Outages of the systems a pipeline depends on, and what barrierflow does about them.

PostgreSQL stops between PREPARE and COMMIT PREPARED: the commit of the completed checkpoint
is retried with backoff until the server is back (8 s), or, past the retry limit, the job
stops naming the sink and ``barrierflow reconcile`` commits the transaction once it is back.

The S3 checkpoint store stops answering for 30 s in the middle of a run (its server is
SIGSTOPped: connections hang, as in a network partition, and it comes back with its data).
Documented behaviour (docs/exactly-once.md, "Outages"): processing goes on; checkpoints that cannot be
stored fail (``EXPIRED`` after ``checkpoint.timeout``, or ``UPLOAD_FAILED``) and count against
``tolerable_failed_checkpoints``; nothing is committed to the sinks meanwhile (their output
waits in staging); once the store answers again the next checkpoint completes and commits
all of it. The output must equal the failure-free run's rows: none lost, none twice.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.errors import SinkCommitFailedError
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.cli.main import main
from barrierflow.faults import at_point
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger

from tests.scenarios.harness import finish, lost_and_duplicated, window_rows, windowed_spec
from tests.scenarios.postgres_output import (
    as_postgres_rows,
    committed_rows,
    create_window_table,
    prepared_transactions,
)
from tests.support.postgres_server import ThrowawayPostgres, restartable_postgres
from tests.support.s3_server import own_s3_server

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.postgres, pytest.mark.timeout(600),
              pytest.mark.slow(90)]
RECORDS = 6000
OUTAGE_SECONDS = 30.0
PG_OUTAGE_SECONDS = 8.0


def test_s3_store_outage_of_30_seconds_fails_checkpoints_but_loses_and_duplicates_nothing(
        spark, tmp_path: Path, reference_rows, monkeypatch: pytest.MonkeyPatch, figures: dict[str, object]) -> None:
    with own_s3_server() as endpoint:
        assert endpoint.pid is not None
        for name, value in endpoint.env().items():
            monkeypatch.setenv(name, value)
        endpoint.create_bucket("bf-outage")
        out = tmp_path / "out"
        spec_path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                                  records=RECORDS, per_batch=100)
        data = yaml.safe_load(spec_path.read_text())
        data["checkpoint"].update({"storage": "s3://bf-outage/checkpoints", "timeout": "5s",
                                   "tolerable_failed_checkpoints": 30})
        spec_path.write_text(yaml.safe_dump(data))
        outage: dict[str, float] = {}
        resume = threading.Timer(OUTAGE_SECONDS, lambda: (os.kill(endpoint.pid, signal.SIGCONT),  # type: ignore[arg-type]
                                                          outage.setdefault("end", time.time())))

        def stop_the_store(job: StreamingJob) -> None:  # after two completed checkpoints
            if "start" not in outage and job.coordinator is not None and len(job.coordinator.completed) >= 2:
                outage["start"] = time.time()
                os.kill(endpoint.pid, signal.SIGSTOP)  # type: ignore[arg-type]
                resume.start()

        try:
            job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))
            result = job.run(until_exhausted=True, duration=400, on_tick=stop_the_store)
        finally:
            resume.cancel()
            os.kill(endpoint.pid, signal.SIGCONT)  # type: ignore[arg-type]
    assert "start" in outage and "end" in outage, "the outage did not happen during the run"
    after = [m for m in result.completed if m.completion_time.timestamp() > outage["end"]]
    back = min(m.completion_time.timestamp() for m in after) if after else float("inf")
    # Failed from the store's stop to the first completion after it answered again (a
    # checkpoint still pending when the bounded run ends fails JOB_STOPPED: not counted).
    during = [f for f in result.failed
              if outage["start"] <= f.failure_time.timestamp() <= back and f.reason.value != "JOB_STOPPED"]
    table = read_committed(f"file://{out}")
    rows = window_rows(table.to_pylist() if table is not None else [])
    lost, duplicated = lost_and_duplicated(rows, reference_rows(RECORDS))
    figures.update({
        "checkpoints failed during the outage": len(during),
        "reasons": sorted({f.reason.value for f in during}),
        "first completed checkpoint after the store came back (s)": round(back - outage["end"], 1),
        "rows lost": lost, "rows duplicated": duplicated,
    })
    assert during, f"no checkpoint failed during the outage: {result.failed}"
    assert after, "no checkpoint completed after the store came back"
    assert (lost, duplicated) == (0, 0)
    assert rows == reference_rows(RECORDS)


# -- PostgreSQL ------------------------------------------------------------------------------

def _pg_pipeline(tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch, **checkpoint: Any) -> tuple[Path, str]:
    table = create_window_table(dsn)
    monkeypatch.setenv("BARRIERFLOW_POSTGRES_DSN", dsn)
    spec_path = windowed_spec(tmp_path, {"name": "pg", "type": "postgres", "table": table},
                              records=RECORDS, per_batch=300)
    data = yaml.safe_load(spec_path.read_text())
    data["checkpoint"].update(checkpoint)
    spec_path.write_text(yaml.safe_dump(data))
    return spec_path, table


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of this test alone (even when the environment gives one, which it
    must never stop), which it may stop and start."""
    with restartable_postgres() as server:
        yield server


def _prepared_rows(spec_path: Path, checkpoint_id: object) -> int:
    """Rows the PostgreSQL sink prepared for ``checkpoint_id`` (from the ledger's handle)."""
    spec = load_spec(spec_path)
    txn = TransactionLedger(CheckpointStore.for_spec(spec).objects, spec.name).get("pg", int(checkpoint_id))  # type: ignore[call-overload]
    return int(txn.handle.get("rows", 0)) if txn is not None else 0


def test_postgres_down_between_prepare_and_commit_prepared_commits_once_it_is_back(
        spark, tmp_path: Path, reference_rows, monkeypatch: pytest.MonkeyPatch, figures: dict[str, object],
        caplog: pytest.LogCaptureFixture, own_postgres: ThrowawayPostgres) -> None:
    server = own_postgres
    dsn = server.endpoint.dsn
    spec_path, table = _pg_pipeline(tmp_path, dsn, monkeypatch, sink_commit_retries=6,
                                    sink_commit_backoff="500ms")
    outage: dict[str, float] = {}

    def back_up() -> None:
        server.start()
        outage["end"] = time.time()

    restart = threading.Timer(PG_OUTAGE_SECONDS, back_up)

    def stop_after_prepare(context: dict[str, object]) -> None:  # the first epoch with rows prepared
        if "start" not in outage and _prepared_rows(spec_path, context["checkpoint_id"]):
            outage["start"] = time.time()
            outage["checkpoint"] = float(context["checkpoint_id"])  # type: ignore[arg-type]
            server.stop("fast")
            restart.start()

    caplog.set_level(logging.WARNING, logger="barrierflow.transactions.two_phase")
    try:
        with at_point("after_precommit", stop_after_prepare):
            job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))
            result = job.run(until_exhausted=True, duration=400)
    finally:
        restart.join(timeout=120)
    rows = committed_rows(dsn, table)
    left_prepared = prepared_transactions(dsn)
    assert "start" in outage and "end" in outage, "the outage did not happen during the run"
    retries = [r for r in caplog.records if "retrying in" in r.getMessage()]
    after = [m for m in result.completed if m.completion_time.timestamp() > outage["end"]]
    back = min(m.completion_time.timestamp() for m in after) if after else float("inf")
    during = [f for f in result.failed if outage["start"] <= f.failure_time.timestamp() <= back
              and f.reason.value != "JOB_STOPPED"]
    expected = as_postgres_rows(reference_rows(RECORDS))
    lost, duplicated = lost_and_duplicated(rows, expected)
    figures.update({"commit retries": len(retries), "checkpoints failed during the outage": len(during),
                    "first completed checkpoint after PostgreSQL came back (s)": round(back - outage["end"], 1),
                    "rows lost": lost, "rows duplicated": duplicated})
    assert retries, "no commit was retried: the outage missed the commit"
    assert f"(checkpoint {int(outage['checkpoint'])}) failed (attempt 1 of 7)" in retries[0].getMessage()
    assert (lost, duplicated) == (0, 0)
    assert rows == expected
    assert left_prepared == []


def test_postgres_down_past_the_retry_limit_stops_the_job_and_reconcile_commits_once_it_is_back(
        spark, tmp_path: Path, reference_rows, monkeypatch: pytest.MonkeyPatch, figures: dict[str, object],
        own_postgres: ThrowawayPostgres) -> None:
    server = own_postgres
    dsn = server.endpoint.dsn
    spec_path, table = _pg_pipeline(tmp_path, dsn, monkeypatch, sink_commit_retries=2,
                                    sink_commit_backoff="200ms")
    stopped: list[float] = []

    def stop_after_prepare(context: dict[str, object]) -> None:  # the first epoch with rows prepared
        if not stopped and _prepared_rows(spec_path, context["checkpoint_id"]):
            stopped.append(time.time())
            server.stop("fast")

    job = StreamingJob(load_spec(spec_path), spark=spark, spec_path=str(spec_path))
    with at_point("after_precommit", stop_after_prepare), pytest.raises(SinkCommitFailedError) as info:
        job.run(until_exhausted=True, duration=400)
    message = str(info.value)
    figures["job stopped after (s)"] = round(time.time() - stopped[0], 1)
    assert "sink 'pg'" in message and "3 attempt(s)" in message and "barrierflow reconcile" in message
    assert "cannot connect" in message
    server.start()
    in_doubt = prepared_transactions(dsn)
    assert in_doubt, "the completed checkpoint's transaction should still be prepared"
    assert main(["reconcile", str(spec_path)]) == 0
    assert prepared_transactions(dsn) == []
    committed_now = committed_rows(dsn, table)
    expected = as_postgres_rows(reference_rows(RECORDS))
    assert committed_now and not (Counter(committed_now) - Counter(expected))
    finish(spark, spec_path)
    rows = committed_rows(dsn, table)
    assert prepared_transactions(dsn) == []
    lost, duplicated = lost_and_duplicated(rows, expected)
    figures.update({"transactions reconcile committed": len(in_doubt), "rows lost": lost,
                    "rows duplicated": duplicated})
    assert rows == expected
