"""Outages of the systems a pipeline depends on, and what barrierflow does about them.

The S3 checkpoint store stops answering for 30 s in the middle of a run (its server is
SIGSTOPped: connections hang, as in a network partition, and it comes back with its data).
Documented behaviour (README, "Outages"): processing goes on; checkpoints that cannot be
stored fail (``EXPIRED`` after ``checkpoint.timeout``, or ``UPLOAD_FAILED``) and count against
``tolerable_failed_checkpoints``; nothing is committed to the sinks meanwhile (their output
waits in staging); once the store answers again the next checkpoint completes and commits
all of it. The output must equal the failure-free run's rows: none lost, none twice.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.runtime.job import StreamingJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec
from barrierflow.testing.s3_server import running_s3_server

from tests.recovery.harness import window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.timeout(600), pytest.mark.slow(90)]
RECORDS = 6000
OUTAGE_SECONDS = 30.0


def _lost_and_duplicated(rows: list[tuple[Any, ...]], reference: list[tuple[Any, ...]]) -> tuple[int, int]:
    got, want = Counter(rows), Counter(reference)
    return sum((want - got).values()), sum((got - want).values())


def test_s3_store_outage_of_30_seconds_fails_checkpoints_but_loses_and_duplicates_nothing(
        spark, tmp_path: Path, reference_rows, monkeypatch: pytest.MonkeyPatch, figures: dict[str, object]) -> None:
    with running_s3_server() as endpoint:
        if endpoint.pid is None:
            pytest.skip("the S3 outage test stops its own moto server; an external endpoint cannot be stopped")
        for name, value in endpoint.env().items():
            monkeypatch.setenv(name, value)
        endpoint.create_bucket("bf-outage")
        out = tmp_path / "out"
        spec_path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"},
                                  records=RECORDS, per_batch=100)
        data = yaml.safe_load(spec_path.read_text())
        data["checkpoint"].update({"storage": "s3://bf-outage/checkpoints", "timeout": "5s",
                                   "tolerable_failed_checkpoints": 5})
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
    lost, duplicated = _lost_and_duplicated(rows, reference_rows(RECORDS))
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
