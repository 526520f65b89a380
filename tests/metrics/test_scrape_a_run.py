"""``barrierflow run`` with a ``metrics:`` block serves ``/metrics`` while it runs.

1. A bounded single-stage run (shared SparkSession: two generator partitions, a few batches,
   some malformed records) on ``port: 0``: the test finds the address in the work dir and
   scrapes on the run loop's own pace (the progress callback, asked every tick) each time a
   checkpoint completed, never by waiting.
2. The two-stage pipeline of tests/support/staged_specs.py with ``run --processes`` (the
   supervisor in this process, each stage in a process and Spark application of its own):
   the supervisor serves both stages' figures on its one endpoint, scraped the same way each
   time a global checkpoint completed, compared with each stage's manifest of it in the store.
   The run keeps ``checkpoint.retained: 2`` itself, from the supervisor: at its end the store
   holds the two newest global checkpoints in every stage.

3. Kafka -> Parquet (shared SparkSession, the test's broker): the test is the source, producing
   one record per run-loop tick (at most every 50 ms) with the timestamp it notes; an
   independent reader (a thread listing the sink's directory) notes when each committed part
   file became visible. The freshness histogram scraped while the run goes matches the reader's
   per-checkpoint figures (visible minus the oldest timestamp the test gave the records of those
   files) within the checkpoint interval, and so does each figure of the run's summary.

What could go wrong and is checked: no server, or one the work dir does not name; figures that
lag the checkpoints the store holds; records that are not the source's; sizes, durations and
dead letters that are not the manifests' and the dead-letter output's; a stage of a process of
its own missing, or under another stage's labels; an address file left behind once the run ended;
a freshness that is not the commit's time minus the oldest arrival it made visible (measured from
another record, another clock, or another commit), or a histogram that is not of those figures.
"""

from __future__ import annotations

import functools
import json
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.metrics import read_address
from barrierflow.metrics.exposition import CONTENT_TYPE
from barrierflow.ops.run import Progress, dead_letters, freshness_lines, run
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime import run_driver
from barrierflow.runtime.stage_processes import process_driver

from bench.freshness import DirectoryWatch
from tests.drivers import short_lived_driver_env
from tests.metrics.scrape import Samples, parse, scrape, value
from tests.pipeline_specs import spec_dict, write_spec
from tests.scenarios.harness import FAST_JVM
from tests.support.kafka_broker import KafkaEndpoint, create_topic
from tests.support.staged_specs import PARTITIONS as STAGED_PARTITIONS
from tests.support.staged_specs import RECORDS as STAGED_RECORDS
from tests.support.staged_specs import two_stage_spec

pytestmark = pytest.mark.spark

PARTITIONS, PER_PARTITION = 2, 200
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def test_a_running_pipeline_serves_its_figures_at_the_address_in_its_work_dir(spark: Any, tmp_path: Path) -> None:
    path = write_spec(tmp_path, spec_dict(
        tmp_path, source={"partitions": PARTITIONS, "records_per_partition": PER_PARTITION,
                          "max_records_per_batch": 100, "malformed_every": 50},
        metrics={"port": 0}))
    pipeline = open_pipeline(path)
    store = pipeline.stages[0].store
    work_dir = Path(pipeline.work_dir)
    # (checkpoint id, samples, the store's ids, failed, its manifest read then: the run keeps only 3)
    scrapes: list[tuple[int, Samples, list[int], int, Manifest]] = []

    def at_each_checkpoint(progress: Progress) -> None:
        last = getattr(progress, "last_completed", None)
        if last is None or (scrapes and scrapes[-1][0] == last):
            return
        address = read_address(work_dir)
        assert address is not None, "no metrics.json in the work dir while the run serves metrics"
        body, content_type = scrape(str(address["url"]))
        assert content_type == CONTENT_TYPE
        samples, _ = parse(body)
        scrapes.append((last, samples, store.checkpoint_ids(), getattr(progress, "failed", 0), store.get(last)))

    outcome = run(path, until_exhausted=True, progress=at_each_checkpoint, progress_every=0.0)

    assert len(scrapes) >= 2, scrapes  # until_exhausted needs two covering checkpoints
    labels = {"pipeline": "t", "stage": "t"}
    for checkpoint_id, samples, stored, failed, manifest in scrapes:
        # The figures are those of the checkpoint just completed, which the store holds. The
        # run is the pipeline's first: every id from 1 up to it completed or failed in it (the
        # run's retention may have deleted older ones from the store meanwhile).
        assert value(samples, "barrierflow_last_checkpoint_id", **labels) == checkpoint_id == max(stored)
        completed = value(samples, "barrierflow_checkpoints_completed_total", **labels)
        assert value(samples, "barrierflow_checkpoints_failed_total", **labels) == failed
        assert completed + failed == checkpoint_id and completed >= 1
        assert value(samples, "barrierflow_checkpoint_duration_seconds_count", **labels) == completed
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
    # The generator's records arrive when a batch reads them: each checkpoint committed to the
    # discard sink has a freshness, from that batch's start (the same UTC clock as the commit).
    fresh = outcome.result.freshness[("t", "out")]
    assert fresh and all(0 <= f.seconds < 600 and f.oldest_arrival <= f.newest_arrival for f in fresh), fresh
    sink_labels = frozenset({**labels, "sink": "out"}.items())  # (absent while no commit was measured)
    upto = final.get(("barrierflow_last_freshness_checkpoint_id", sink_labels), 0)
    assert final.get(("barrierflow_checkpoint_freshness_seconds_count", sink_labels), 0) \
        == len([f for f in fresh if f.checkpoint_id <= upto])


@pytest.mark.kafka
@pytest.mark.slow(75)
@pytest.mark.timeout(1500)
def test_the_supervisor_of_stage_processes_serves_every_stages_figures_on_one_endpoint(
        kafka_endpoint: KafkaEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, setting in short_lived_driver_env().items():  # the stage processes' drivers
        monkeypatch.setenv(name, setting)
    # The stage processes' start-up is not what is tested: a loaded machine starts two drivers slowly.
    monkeypatch.setattr(run_driver, "process_driver", functools.partial(process_driver, start_timeout=900.0))
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["spark"] = {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM}
    data["metrics"] = {"port": 0}
    data["checkpoint"]["retained"] = 2
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    pipeline = open_pipeline(path)
    work_dir = Path(pipeline.work_dir)
    # (global checkpoint id, samples, newest in the global store, global checkpoints failed,
    #  each stage's manifest of that global checkpoint, read then: the run keeps only 2)
    scrapes: list[tuple[int, Samples, int, int, dict[str, Manifest]]] = []

    def at_each_global_checkpoint(progress: Progress) -> None:
        last = getattr(progress, "last_completed", None)
        if last is None or (scrapes and scrapes[-1][0] == last):
            return
        address = read_address(work_dir)
        assert address is not None, "no metrics.json in the work dir while the supervisor serves metrics"
        body, content_type = scrape(str(address["url"]))
        assert content_type == CONTENT_TYPE
        scrapes.append((last, parse(body)[0], pipeline.cuts.completed_ids()[-1], getattr(progress, "failed", 0),
                        {stage.name: stage.store.get(last) for stage in pipeline.stages}))

    outcome = run(path, until_exhausted=True, processes=True, progress=at_each_global_checkpoint,
                  progress_every=0.0)

    assert len(scrapes) >= 2, scrapes  # until_exhausted needs two covering global checkpoints
    for checkpoint_id, samples, newest, failed, manifests in scrapes:
        assert checkpoint_id == newest  # the global checkpoint just completed is the store's newest
        assert value(samples, "barrierflow_run_attempt", pipeline="two") == outcome.attempt
        for stage in pipeline.stages:
            labels = {"pipeline": "two", "stage": stage.name}
            # Each stage's figures are those of its part of that global checkpoint, as its manifest
            # says; its counts are the run's global checkpoints (the pipeline's first run: every id
            # from 1 up to this one completed or failed in it).
            manifest = manifests[stage.name]
            assert value(samples, "barrierflow_last_checkpoint_id", **labels) == checkpoint_id, stage.name
            completed = value(samples, "barrierflow_checkpoints_completed_total", **labels)
            assert value(samples, "barrierflow_checkpoints_failed_total", **labels) == failed
            assert completed + failed == checkpoint_id and completed >= 1, stage.name
            assert value(samples, "barrierflow_checkpoint_duration_seconds_count", **labels) == completed
            assert value(samples, "barrierflow_last_checkpoint_duration_seconds", **labels) \
                == manifest.total_ms / 1000
            assert value(samples, "barrierflow_last_checkpoint_full_bytes", **labels) == manifest.full_bytes > 0
            assert value(samples, "barrierflow_last_checkpoint_incremental_bytes", **labels) \
                == manifest.incremental_bytes
            assert value(samples, "barrierflow_last_checkpoint_age_seconds", **labels) >= 0
        alignment = manifests["b"].alignment
        assert alignment is not None  # stage b reads a channel: it aligns barriers
        assert value(samples, "barrierflow_last_checkpoint_alignment_seconds", pipeline="two", stage="b") \
            == alignment.alignment_ms / 1000.0
        assert ("barrierflow_last_checkpoint_alignment_seconds",
                frozenset({"pipeline": "two", "stage": "a"}.items())) not in samples  # a reads the source
    final = scrapes[-1][1]
    for stage in ("a", "b"):  # counts from each stage process's progress file
        assert value(final, "barrierflow_records_total", pipeline="two", stage=stage) > 0, stage
        assert value(final, "barrierflow_batches_total", pipeline="two", stage=stage) >= 1, stage
    assert value(final, "barrierflow_records_total", pipeline="two", stage="a") <= STAGED_PARTITIONS * STAGED_RECORDS
    assert read_address(work_dir) is None  # the server stopped with the run
    # The supervisor applied checkpoint.retained: the two newest global checkpoints, whole, in every stage.
    newest = [m.checkpoint_id for m in outcome.result.completed[-2:]]
    assert pipeline.cuts.completed_ids() == newest
    for stage in pipeline.stages:  # (and a stage's part of a global checkpoint still in flight at the stop)
        kept = stage.store.checkpoint_ids()
        assert kept[:2] == newest and all(c > newest[-1] for c in kept[2:]), (stage.name, kept)
    # Each stage process stores its sinks' freshness beside its checkpoints (chk-<n>/_freshness.json);
    # the supervisor reads them into the run's result (and its metrics feed) as a run in one process
    # has them: stage b's Parquet sink has one figure per global checkpoint that committed rows, each
    # the stored one where the store still keeps it.
    figures = outcome.result.freshness.get(("b", "out"), [])
    assert figures, outcome.result.freshness
    ids = [f.checkpoint_id for f in figures]
    assert ids == sorted(set(ids)) and set(ids) <= {m.checkpoint_id for m in outcome.result.completed}
    store_b = next(stage.store for stage in pipeline.stages if stage.name == "b")
    for figure in figures:
        assert figure.committed_at > figure.oldest_arrival
        stored = store_b.freshness(figure.checkpoint_id)
        assert stored in ({}, {"out": figure.seconds}), (figure, stored)
    assert any(store_b.freshness(i) for i in ids)





@pytest.mark.kafka
@pytest.mark.slow(45)
def test_the_freshness_histogram_matches_an_independent_reader_within_the_checkpoint_interval(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from kafka import KafkaProducer

    interval = 1.0
    topic = f"fresh-{time.time_ns()}"
    create_topic(kafka_endpoint, topic, 2)
    out = tmp_path / "out"
    data = spec_dict(
        tmp_path, name="f",
        sources=[{"name": "in", "type": "kafka", "bootstrap_servers": kafka_endpoint.bootstrap_servers,
                  "topics": [topic], "format": "json", "json_fields": {"id": "long"}}],
        transformation={"function": "barrierflow.transforms.projection:project", "output_mode": "append",
                        "options": {"columns": {"id": "id"}}},
        sinks=[{"name": "out", "type": "parquet", "path": f"file://{out}"}],
        checkpoint={"interval": f"{interval}s", "timeout": "600s"}, metrics={"port": 0})
    path = write_spec(tmp_path, data)
    work_dir = Path(open_pipeline(path).work_dir)
    producer = KafkaProducer(bootstrap_servers=kafka_endpoint.bootstrap_servers, linger_ms=0)
    sent: dict[int, int] = {}  # record id -> the timestamp (ms) the test gave it
    scrapes: list[Samples] = []
    seen: list[int] = []
    reader = DirectoryWatch(out)
    reader.start()

    def tick(progress: Progress) -> None:
        now_ms = int(time.time() * 1000)
        if not sent or now_ms - max(sent.values()) >= 50:  # the test paces the source
            sent[len(sent)] = now_ms
            producer.send(topic, value=json.dumps({"id": len(sent) - 1}).encode(), partition=len(sent) % 2,
                          timestamp_ms=now_ms)
        last = getattr(progress, "last_completed", None)
        if last is not None and (not seen or seen[-1] != last):
            seen.append(last)
            address = read_address(work_dir)
            assert address is not None
            scrapes.append(parse(scrape(str(address["url"]))[0])[0])

    try:
        outcome = run(path, checkpoints=5, progress=tick, progress_every=0.0)
    finally:
        reader.done.set()
        reader.join()
        producer.close()

    # The reader's figure of each checkpoint: when the last part file of its epoch's batches
    # became visible, minus the oldest timestamp the test gave a record in them.
    reader_figures: dict[int, float] = {}
    arrivals: dict[int, tuple[datetime, datetime]] = {}  # the oldest and newest the test gave them
    for manifest in outcome.result.completed:
        names = [n for n in reader.first_seen if manifest.first_batch_id <= int(n.split("-")[1])
                 <= manifest.spark_batch_id]
        if not names:
            continue  # an epoch without records: nothing became visible
        ids = [i for n in names for i in pq.read_table(out / n, columns=["id"]).column("id").to_pylist()]
        stamps = [EPOCH + timedelta(milliseconds=sent[i]) for i in ids]
        arrivals[manifest.checkpoint_id] = (min(stamps), max(stamps))
        reader_figures[manifest.checkpoint_id] = (max(reader.first_seen[n] for n in names)
                                                  - min(stamps)).total_seconds()
    figures = outcome.result.freshness[("f", "out")]
    assert len(reader_figures) >= 3, reader_figures  # checkpoints that made records visible
    assert [f.checkpoint_id for f in figures] == sorted(reader_figures)  # one figure per such commit, no other
    for figure in figures:  # the run's own figures (its summary's) agree with the reader's
        # Measured from exactly the epoch's oldest record (and its newest), to the millisecond the test gave them.
        assert (figure.oldest_arrival, figure.newest_arrival) == arrivals[figure.checkpoint_id], figure
        assert abs(figure.seconds - reader_figures[figure.checkpoint_id]) <= interval, (figure, reader_figures)
    # The histogram scraped from the running pipeline: the figures of the checkpoints up to the
    # one its gauge names, bucket by bucket within the interval of the reader's.
    labels = {"pipeline": "f", "stage": "f", "sink": "out"}
    final = next(s for s in reversed(scrapes) if ("barrierflow_last_freshness_checkpoint_id",
                                                    frozenset(labels.items())) in s)
    upto = value(final, "barrierflow_last_freshness_checkpoint_id", **labels)
    scraped = [f for f in figures if f.checkpoint_id <= upto]
    theirs = [reader_figures[f.checkpoint_id] for f in scraped]
    assert value(final, "barrierflow_checkpoint_freshness_seconds_count", **labels) == len(scraped) >= 2
    assert math.isclose(value(final, "barrierflow_checkpoint_freshness_seconds_sum", **labels),
                        sum(f.seconds for f in scraped))
    assert abs(value(final, "barrierflow_checkpoint_freshness_seconds_sum", **labels) - sum(theirs)) \
        <= interval * len(theirs)
    assert value(final, "barrierflow_last_checkpoint_freshness_seconds", **labels) == scraped[-1].seconds
    for (name, sample_labels), count in final.items():
        if name != "barrierflow_checkpoint_freshness_seconds_bucket" or dict(sample_labels)["sink"] != "out":
            continue
        bound = float(dict(sample_labels)["le"].replace("+Inf", "inf"))
        assert sum(t <= bound - interval for t in theirs) <= count <= sum(t <= bound + interval for t in theirs), \
            (bound, count, theirs)
    assert "freshness (sink out: commit minus oldest arrival, per checkpoint): p50" in \
        freshness_lines(outcome.result.freshness, stages=1)[0]
    # Stored beside each checkpoint the store still holds, for the Checkpoints page.
    store = open_pipeline(path).stages[0].store
    kept = [f for f in figures if f.checkpoint_id in store.checkpoint_ids()]
    assert kept and all(store.freshness(f.checkpoint_id) == {"out": f.seconds} for f in kept)
