"""The Checkpoints page of a real two-stage pipeline, rendered in headless Chromium.

1. The two-stage pipeline of tests/support/staged_specs.py (stage ``a``: bounded
   generator -> channel ``ab``; stage ``b``: ``ab`` -> Parquet through 2PC), unaligned, runs on
   the session's Kafka-protocol broker and SparkSession until two global checkpoints
   completed; ``verify`` (the operation) then stores each stage's verification result.
2. The Checkpoints app (the real one; only the Airflow session check is replaced, that is
   covered by test_checkpoints_page_in_airflow.py) is served by uvicorn on a free 127.0.0.1
   port and Chromium opens the pipeline's page.
3. Every completed global checkpoint has its row (status, times, total ms, verdict) and one row
   per stage in spec order, whose alignment ms, channel-state records, mode, barrier batch,
   sync ms and back-edge ranges are those of the stage's manifest and of what the global
   manifest recorded about the stage; all values are compared with the ones read back
   through barrierflow.ops, none is written in the test.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from barrierflow.local_ports import free_port
from barrierflow.ops.checkpoints import list_checkpoints, show_checkpoint
from barrierflow.ops.verify import verify
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.spec import parse_staged_spec
from barrierflow.ui import create_app
from fastapi import FastAPI

from tests.pipeline_specs import write_spec
from tests.support.browser import HeadlessChromium, find_chromium
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import two_stage_spec
from tests.ui.test_app import signed_in_as_tester
from tests.ui.test_global_history import read_global_table

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.slow(40)]

GLOBAL_CHECKPOINTS = 2


@contextmanager
def serving(app: FastAPI, timeout: float = 30) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free 127.0.0.1 port in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="checkpoints-app", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped before it served"
        assert time.monotonic() < deadline, f"uvicorn did not start within {timeout:.0f}s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_checkpoints_page_shows_each_stage_of_a_real_two_stage_pipeline(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.fail("no chromium binary on PATH: install it (Debian: apt-get install chromium; `make test` does) "
                    "- this test drives the page in a real browser and is not skipped")
    started = time.monotonic()
    data = two_stage_spec(tmp_path, kafka_endpoint, mode="unaligned")
    folder = tmp_path / "pipelines"
    folder.mkdir()
    spec_path = write_spec(folder, data, "two.yaml")

    # Step 1: the real run, then verification as the scheduled DAG does it.
    run = StagedPipelineJob(parse_staged_spec(data), spark=spark).run(checkpoints=GLOBAL_CHECKPOINTS, duration=150)
    assert len(run.completed) >= GLOBAL_CHECKPOINTS, "fewer global checkpoints than asked for completed"
    ran = time.monotonic() - started
    verified = verify(spec_path)
    assert verified.reports and not verified.failed, [r.reason() for r in verified.failed]
    listing = list_checkpoints(spec_path)
    assert len(listing.cuts) >= GLOBAL_CHECKPOINTS and list(listing.stages) == ["a", "b"]

    # Steps 2 and 3: the page in Chromium.
    with serving(create_app(str(folder), authenticate=signed_in_as_tester)) as url, \
            HeadlessChromium(chromium) as browser:
        browser.open(f"{url}/?pipeline=two")
        table = read_global_table(browser.html())
        assert browser.evaluate("document.querySelectorAll('#checkpoints tr.stage').length") == \
            len(table.stage_order)
    completed = {m.checkpoint_id: m for m in listing.cuts}
    assert set(table.globals) == set(completed), (sorted(table.globals), sorted(completed))
    for cid, manifest in completed.items():
        row = table.globals[cid]
        assert row["status"] == "COMPLETED" and row["attempt"] == str(manifest.attempt)
        assert row["trigger_time"] == manifest.trigger_time.isoformat()
        assert row["completion_time"] == manifest.completion_time.isoformat()
        assert float(row["total_ms"]) == manifest.total_ms
        assert row["verification"] == "passed"
        assert [stage for c, stage in table.stage_order if c == cid] == ["a", "b"]
        stage_manifests = show_checkpoint(spec_path, cid).stages
        for stage, snapshot in manifest.stages.items():
            cells, stage_manifest = table.stages[(cid, stage)], stage_manifests[stage]
            assert cells["barrier_batch"] == str(snapshot.spark_batch_id) == str(stage_manifest.spark_batch_id)
            assert float(cells["sync_ms"]) == stage_manifest.sync_ms == snapshot.sync_ms
            assert float(cells["async_ms"]) == stage_manifest.async_ms == snapshot.async_ms
            assert int(cells["channel_state_records"]) == snapshot.channel_state_records
            assert cells["verification"] == "passed"
            alignment = stage_manifest.alignment
            if alignment is None:  # stage a reads the generator, not a channel
                assert (cells["mode"], cells["alignment_ms"], snapshot.mode) == ("", "", None)
                assert cells["back_edge_ranges"] == "" and snapshot.channel_state_records == 0
                continue
            assert cells["mode"] == alignment.mode == snapshot.mode == "unaligned"
            assert float(cells["alignment_ms"]) == alignment.alignment_ms == snapshot.alignment_ms
            assert int(cells["channel_state_records"]) == alignment.channel_state_records
            assert cells["back_edge_ranges"] == "; ".join(
                f"{e.partition} [{e.start}, {e.end}) {e.records}" for e in alignment.channel_state if e.back_edge)
    channel_state = [int(table.stages[(cid, "b")]["channel_state_records"]) for cid in sorted(completed)]
    print(f"\ntwo-stage Checkpoints page: run {ran:.1f}s, total {time.monotonic() - started:.1f}s; global "
          f"checkpoints {sorted(completed)}, channel-state records of b {channel_state}")
