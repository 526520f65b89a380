"""``barrierflow run`` with a ``metrics:`` block serves ``/metrics`` while it runs (shared SparkSession).

A bounded single-stage run (two generator partitions, a few batches, some malformed records) on
``port: 0``: the test finds the address in the work dir and scrapes on the run loop's own pace
(the progress callback, asked every tick) each time a checkpoint completed, never by waiting.
What could go wrong and is checked: no server, or one the work dir does not name; figures that
lag the checkpoints the store holds; records that are not the source's; sizes, durations and
dead letters that are not the manifests' and the dead-letter output's; an address file left
behind once the run ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from barrierflow.metrics import read_address
from barrierflow.metrics.exposition import CONTENT_TYPE
from barrierflow.ops.run import AnyProgress, dead_letters, run
from barrierflow.pipeline.model import open_pipeline

from tests.metrics.scrape import Samples, parse, scrape, value
from tests.pipeline_specs import spec_dict, write_spec

pytestmark = pytest.mark.spark

PARTITIONS, PER_PARTITION = 2, 200


def test_a_running_pipeline_serves_its_figures_at_the_address_in_its_work_dir(spark: Any, tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(
        tmp_path, source={"partitions": PARTITIONS, "records_per_partition": PER_PARTITION,
                          "max_records_per_batch": 100, "malformed_every": 50},
        metrics={"port": 0}))
    pipeline = open_pipeline(path)
    store = pipeline.stages[0].store
    work_dir = Path(pipeline.work_dir)
    scrapes: list[tuple[int, Samples, list[int]]] = []  # (checkpoint id, samples, manifests in the store)

    def at_each_checkpoint(progress: AnyProgress) -> None:
        last = getattr(progress, "last_completed", None)
        if last is None or (scrapes and scrapes[-1][0] == last):
            return
        address = read_address(work_dir)
        assert address is not None, "no metrics.json in the work dir while the run serves metrics"
        body, content_type = scrape(str(address["url"]))
        assert content_type == CONTENT_TYPE
        samples, _ = parse(body)
        scrapes.append((last, samples, store.checkpoint_ids()))

    outcome = run(path, until_exhausted=True, progress=at_each_checkpoint, progress_every=0.0)

    assert len(scrapes) >= 2, scrapes  # until_exhausted needs two covering checkpoints
    labels = {"pipeline": "t", "stage": "t"}
    for checkpoint_id, samples, stored in scrapes:
        # The figures are those of the checkpoint just completed, which the store holds.
        assert value(samples, "barrierflow_last_checkpoint_id", **labels) == checkpoint_id == max(stored)
        assert value(samples, "barrierflow_checkpoints_completed_total", **labels) == len(stored) >= 1
        assert value(samples, "barrierflow_checkpoint_duration_seconds_count", **labels) == len(stored)
        assert value(samples, "barrierflow_checkpoints_failed_total", **labels) == 0
        manifest = store.get(checkpoint_id)
        assert value(samples, "barrierflow_last_checkpoint_full_bytes", **labels) == manifest.full_bytes > 0
        assert value(samples, "barrierflow_last_checkpoint_incremental_bytes", **labels) \
            == manifest.incremental_bytes > 0
        assert value(samples, "barrierflow_last_checkpoint_duration_seconds", **labels) == manifest.total_ms / 1000
        assert value(samples, "barrierflow_last_checkpoint_age_seconds", **labels) >= 0
        assert value(samples, "barrierflow_batches_total", **labels) >= 1
        assert value(samples, "barrierflow_records_per_second", **labels) > 0
        assert value(samples, "barrierflow_run_attempt", pipeline="t") == outcome.attempt
    # The last checkpoint covers the whole bounded source: every record read, as the result says.
    final = scrapes[-1][1]
    assert value(final, "barrierflow_records_total", **labels) == PARTITIONS * PER_PARTITION == outcome.result.records
    assert value(final, "barrierflow_dead_letters_total", **labels) \
        == dead_letters(pipeline)["t"].count == PARTITIONS * PER_PARTITION // 50
    assert read_address(work_dir) is None  # the server stopped with the run
