"""Pipelines of several stages on a real Kafka-protocol broker and the shared SparkSession.

Stage ``a`` reads a bounded generator and writes channel ``ab``; stage ``b`` reads ``ab`` and
writes Parquet through the two-phase-commit sink. Barriers are requested by the pipeline
coordinator at ``a`` only and reach ``b`` in-band, as barrier records on every partition of
``ab``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from barrierflow.barriers.records import data_headers, decode_barrier
from barrierflow.checkpointing.global_manifest import global_key
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.checkpointing.uploader import SnapshotUploader
from barrierflow.kafka_io.row_batches import decode
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec
from barrierflow.storage import open_store

from tests.support.kafka_broker import KafkaEndpoint, channel_rows, partition_records, produce, recreate_topic
from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
ASYNC_NICE = 6
#: The second run's ``checkpoint.min_pause`` (seconds), longer than the 700 ms interval.
MIN_PAUSE = 1.2


class UploadThreads:
    """Where each stage's asynchronous phase ran: per stage store, the (thread name, thread
    nice value) of each snapshot upload and of each shared file's write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.uploads: dict[str, set[tuple[str, int]]] = {}
        self.files: dict[str, set[tuple[str, int]]] = {}
        upload, put_shared = SnapshotUploader.upload, CheckpointStore.put_shared

        def recorded_upload(uploader: SnapshotUploader, snapshot: Any) -> Any:
            self._record(self.uploads, uploader.store.uri)
            return upload(uploader, snapshot)

        def recorded_put(store: CheckpointStore, sha256: str, local_path: str) -> None:
            self._record(self.files, store.uri)
            put_shared(store, sha256, local_path)

        monkeypatch.setattr(SnapshotUploader, "upload", recorded_upload)
        monkeypatch.setattr(CheckpointStore, "put_shared", recorded_put)

    @staticmethod
    def _record(into: dict[str, set[tuple[str, int]]], uri: str) -> None:
        stage = uri.rstrip("/").rsplit("/", 1)[-1]
        into.setdefault(stage, set()).add(
            (threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    def clear(self) -> None:
        self.uploads.clear()
        self.files.clear()


def test_two_stage_pipeline_restores_a_global_checkpoint_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run until one global checkpoint completed and stop (stage a has by then written records
    after that barrier); start again with ``barrierflow run``: the pipeline restores the global
    checkpoint as attempt 1, stage a writes those records again, stage b skips the attempt-0
    copies; the committed output holds every record once, and ``checkpoints list --json`` shows
    both runs' global checkpoints with each stage's part.

    Both stages honour the upload settings: in the first run (``async_nice: 6``) each stage's
    asynchronous phase and its file writes run on background threads 6 steps below the
    driver's CPU priority; in the second (``synchronous_upload: true``) each stage uploads
    on the thread that drives it, holding processing meanwhile, and (``min_pause: 1.2s``)
    no global checkpoint is triggered sooner than that after the previous one completed."""
    data = two_stage_spec(tmp_path, kafka_endpoint)
    data["checkpoint"]["async_nice"] = ASYNC_NICE
    spec = parse_staged_spec(data)
    threads = UploadThreads(monkeypatch)
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    first = StagedPipelineJob(spec, spark=spark).run(checkpoints=1, duration=150)
    lowered = min(19, base + ASYNC_NICE)
    for stage in ("a", "b"):
        assert threads.uploads.get(stage) and threads.files.get(stage), f"stage {stage} uploaded nothing"
        assert {(name.split("_")[0], nice) for name, nice in threads.uploads[stage]} == {("chk-async", lowered)}, \
            (stage, threads.uploads[stage])
        assert {nice for _name, nice in threads.files[stage]} == {lowered}, (stage, threads.files[stage])
    assert len(first.completed) == 1
    manifest = first.completed[0]
    # The global manifest names a manifest of each stage with the same id.
    assert set(manifest.stages) == {"a", "b"}
    for name, part in manifest.stages.items():
        assert part.manifest == f"stages/{name}/chk-{manifest.checkpoint_id}/_metadata.json"
        assert (tmp_path / "chk" / part.manifest).is_file()
    assert (tmp_path / "chk" / global_key(manifest.checkpoint_id, "_metadata")).is_file()
    assert manifest.stages["b"].mode == "aligned" and manifest.stages["a"].mode is None
    alignment = next(m for m in first.stage_manifests["b"] if m.checkpoint_id == manifest.checkpoint_id).alignment
    assert alignment is not None and alignment.mode == "aligned" and alignment.channel_state == []
    topic = spec.channels[0].topic
    assert set(alignment.barrier_offsets) == {f"{topic}:0", f"{topic}:1"}
    triggers = {m.checkpoint_id: round(m.trigger_time.timestamp() * 1000) for m in first.completed}
    _check_channel(kafka_endpoint, topic, first.stage_manifests["a"], triggers)
    # b did not trigger its checkpoints: its manifests time them from the global trigger the
    # barriers carried (so total_ms is from the same start as the pipeline's).
    for m in first.stage_manifests["b"]:
        if m.checkpoint_id in triggers:
            assert round(m.trigger_time.timestamp() * 1000) == triggers[m.checkpoint_id], m.checkpoint_id
    stale = _records_after(kafka_endpoint, topic, alignment.barrier_offsets)

    # The second start goes through the command line (the job gets the shared SparkSession,
    # the active one): one progress display, then the global checkpoints as `checkpoints list`.
    import yaml
    from barrierflow.cli.main import main

    path = tmp_path / "two.yaml"
    # retained: the run's retention keeps every global checkpoint (the listing names the first run's).
    data["checkpoint"].update({"async_nice": 0, "synchronous_upload": True, "min_pause": MIN_PAUSE,
                               "retained": 100})
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    capsys.readouterr()
    threads.clear()
    assert main(["run", str(path), "--until-exhausted", "--duration", "150"]) == 0
    out, err = capsys.readouterr()
    driver = threading.current_thread().name
    for stage in ("a", "b"):
        assert threads.uploads.get(stage) == {(driver, base)}, (stage, threads.uploads.get(stage))
    # min_pause: no global checkpoint of the second run was triggered sooner than MIN_PAUSE
    # after the one before it completed (the 700 ms interval alone would trigger sooner).
    rerun = [m for m in GlobalCheckpointStore(open_store(f"file://{tmp_path / 'chk'}"), spec.name).completed()
             if m.attempt == 1]
    assert len(rerun) >= 2, rerun
    for before, after in itertools.pairwise(rerun):
        gap = (after.trigger_time - before.completion_time).total_seconds()
        assert gap >= MIN_PAUSE - 0.05, f"global checkpoint {after.checkpoint_id} triggered {gap:.2f}s after " \
                                        f"{before.checkpoint_id} completed (min_pause {MIN_PAUSE}s)"
    assert "pipeline two (2 stages, attempt 1):" in out and "embedded broker" not in out, out
    progress = [line for line in err.splitlines() if line.startswith("a: batch=")]
    assert progress and " | b: batch=" in progress[-1] and "global_checkpoint=" in progress[-1], err
    assert main(["checkpoints", "list", str(path), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["attempt"] == 1 and listing["abandoned"] == [] and list(listing["stages"]) == ["a", "b"]
    assert listing["completed"][0]["checkpoint_id"] == manifest.checkpoint_id
    second = listing["completed"][1:]
    assert second and all(m["checkpoint_id"] > manifest.checkpoint_id and m["attempt"] == 1 for m in second)
    for m in listing["completed"]:
        assert m["stages"]["b"]["mode"] == "aligned" and m["stages"]["a"]["mode"] is None
        assert {"alignment_ms", "sync_ms", "async_ms", "channel_state_records"} <= set(m["stages"]["b"])
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    seen = sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True))
    assert seen == [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]

    # The channel's broker loses its records (here: the topic is deleted and recreated, and
    # new records take the old offsets): a restore is refused, naming the channel, and changes nothing.
    recreate_topic(kafka_endpoint, topic, 2)
    produce(kafka_endpoint, topic, [(n % 2, b"k", b"{}", data_headers(9)) for n in range(800)])
    assert main(["restore", str(path)]) == 2
    refused = capsys.readouterr().err
    assert f"channel 'ab' (topic {topic}) partition 0 offset" in refused and "a data record written by attempt 9" \
        in refused, refused
    assert main(["checkpoints", "list", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attempt"] == 1
    print(f"\ntwo stages: run 1: {first.elapsed_seconds:.1f}s, global total_ms {round(manifest.total_ms)}; "
          f"{stale} attempt-0 records after the restored barrier skipped; run 2 (attempt 1, CLI): {out.strip()}")


def _records_after(endpoint: KafkaEndpoint, topic: str, barriers: dict[str, int]) -> int:
    """Data records on the channel after the given barrier offsets (what a restore must skip)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=endpoint.bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, n) for n in range(2)]
        ends = consumer.end_offsets(tps)
        return sum(max(0, ends[tp] - barriers[f"{topic}:{tp.partition}"] - 1) for tp in tps)
    finally:
        consumer.close()


def _check_channel(endpoint: KafkaEndpoint, topic: str, a_manifests: list[Any], triggers: dict[int, int]) -> None:
    """The raw channel: every record carries attempt 0; each partition holds barriers 1..n in
    order, each carrying its global checkpoint's trigger time (``triggers``: id -> epoch ms);
    the data records before barrier n are exactly those stage a read before its barrier n
    (offsets from a's manifests), so no record crosses its epoch's barrier."""
    cuts = {m.checkpoint_id: m.barrier_offsets["events"] for m in a_manifests}
    for number in range(2):
        records = partition_records(endpoint, topic, number)
        assert all(dict(r.headers)["bf-attempt"] == b"0" for r in records)
        epoch = 1
        barriers = []
        for record in records:
            marker = decode_barrier(record.headers)
            if marker is not None:
                barriers.append(marker.checkpoint_id)
                epoch = marker.checkpoint_id + 1
                if marker.checkpoint_id in triggers:
                    assert marker.triggered_ms == triggers[marker.checkpoint_id], marker
                continue
            for row in decode(record.value).to_pylist():  # a row batch
                cut_before = cuts.get(epoch - 1, {}).get(str(row["src_partition"]), 0)
                cut = cuts.get(epoch, {}).get(str(row["src_partition"]))
                assert row["src_offset"] >= cut_before and (cut is None or row["src_offset"] < cut), (epoch, row)
        assert barriers == sorted(set(barriers)) and set(cuts) <= set(barriers), (barriers, sorted(cuts))


def three_stage_spec(tmp_path: Path, endpoint: KafkaEndpoint) -> dict[str, Any]:
    """x and y read generators and write channels c1 and c2; z reads both and writes Parquet.
    The channels carry different fields (c1 ``value``, c2 ``amount``): z reads their union."""
    suffix = uuid.uuid4().hex[:8]

    def upstream(name: str, channel: str, batch: int, value_as: str) -> dict[str, Any]:
        columns = {"src_partition": "partition", "src_offset": "offset", "key": "key", value_as: "value"}
        return {"name": name,
                "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                             "max_records_per_batch": batch, "keys": 7, "records_per_partition": RECORDS}],
                "transformation": {"function": "barrierflow.transforms.projection:project",
                                   "options": {"columns": columns}},
                "sinks": [{"type": "channel", "channel": channel}]}

    def fields(value_as: str) -> dict[str, str]:
        return {"src_partition": "long", "src_offset": "long", "key": "long", value_as: "long"}

    return {
        "name": "three",
        "work_dir": str(tmp_path / "work"),
        "channels": [{"name": c, "topic": f"{c}-{suffix}", "partitions": 2, "bootstrap": endpoint.bootstrap_servers}
                     for c in ("c1", "c2")],
        "stages": [
            upstream("x", "c1", 40, "value"), upstream("y", "c2", 15, "amount"),
            {"name": "z",
             "sources": [{"type": "channel", "channel": c, "max_records_per_batch": 30, "json_fields": fields(v)}
                         for c, v in (("c1", "value"), ("c2", "amount"))],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"topic": "topic", "src_partition": "src_partition",
                                                        "src_offset": "src_offset", "value": "value",
                                                        "amount": "amount"}}},
             "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]},
        ],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "700ms", "timeout": "120s",
                       "mode": "unaligned"},
    }


def test_three_stages_one_reading_two_channels_unaligned_then_restored_aligned_with_a_timeout(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """z aligns four input partitions of two channels, unaligned: the snapshot is taken at the
    first barrier and the records other partitions deliver before theirs are channel state.
    The pipeline stops after one global checkpoint and restarts from it (attempt 1) with
    aligned checkpoints and a 1 ms alignment timeout (a mode change across a restore, as Flink
    allows): each checkpoint is past its timeout when z first sees its barriers (the timeout
    counts from the trigger), so z snapshots where its batch ends and the records before the
    barriers are channel state, as unaligned. The committed output holds every record of both
    upstream stages once. The two channels carry different fields: z's rows have c1's
    ``value`` or c2's ``amount``, null for the other."""
    data = three_stage_spec(tmp_path, kafka_endpoint)
    spec = parse_staged_spec(data)
    first = StagedPipelineJob(spec, spark=spark).run(checkpoints=1, duration=170)
    data["checkpoint"].update({"mode": "aligned", "alignment_timeout": "1ms"})
    second = StagedPipelineJob(parse_staged_spec(data), spark=spark).run(until_exhausted=True, duration=170)

    completed = first.completed + second.completed
    assert first.completed and second.completed, "no global checkpoint completed"
    z = {m.checkpoint_id: m for m in first.stage_manifests["z"] + second.stage_manifests["z"]}
    modes = {m.checkpoint_id: m.stages["z"].mode for m in completed}
    assert {modes[m.checkpoint_id] for m in first.completed} == {"unaligned"}
    # Barriers z reads within one batch still align; the others are cut where z stands.
    assert {modes[m.checkpoint_id] for m in second.completed} <= {"aligned", "aligned-timed-out"}
    assert "aligned-timed-out" in {modes[m.checkpoint_id] for m in second.completed}, modes
    for manifest in completed:
        assert set(manifest.stages) == {"x", "y", "z"}
        alignment = z[manifest.checkpoint_id].alignment
        assert alignment is not None
        assert alignment.alignment_ms == 0.0 or alignment.mode != "unaligned"
        assert len(alignment.barrier_offsets) == 4  # both partitions of both channels delivered
        assert manifest.stages["z"].channel_state_records == alignment.channel_state_records
        for entry in alignment.channel_state:
            # A range may hold only barrier records (or an older attempt's): 0 data rows.
            assert entry.end > entry.start and 0 <= entry.records <= channel_rows(
                kafka_endpoint, entry.partition, entry.start, entry.end)
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    seen = sorted(zip(table.column("topic").to_pylist(), table.column("src_partition").to_pylist(),
                      table.column("src_offset").to_pylist(), strict=True))
    topics = sorted(c.topic for c in spec.channels)
    assert seen == [(t, p, o) for t in topics for p in range(PARTITIONS) for o in range(RECORDS)]
    c1 = spec.channel("c1").topic
    carried = {(topic == c1, value is not None, amount is not None) for topic, value, amount in zip(
        table.column("topic").to_pylist(), table.column("value").to_pylist(), table.column("amount").to_pylist(),
        strict=True)}
    assert carried == {(True, True, False), (False, False, True)}  # each channel's own field, nulls for the other
    print(f"\nthree stages, unaligned then aligned with a 1 ms timeout: run 1 {first.elapsed_seconds:.1f}s, "
          f"run 2 {second.elapsed_seconds:.1f}s; z's modes {modes}; "
          f"global total_ms {[round(m.total_ms) for m in completed]}; channel-state records of z: "
          f"{[z[m.checkpoint_id].alignment.channel_state_records for m in completed]}")  # type: ignore[union-attr]


def test_cli_runs_a_two_stage_pipeline_on_the_embedded_broker_and_lists_its_global_checkpoints(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``barrierflow run SPEC --until-exhausted`` on a multi-stage spec whose channel has
    ``bootstrap: embedded`` starts the embedded Apache Kafka broker on 127.0.0.1 for the run with its data under the
    pipeline's work dir (the shared SparkSession is reused: the job's builder gets the active
    one), shows one progress display with every stage and the last global checkpoint, commits
    every record once; ``checkpoints list`` (text and ``--json``) shows the global checkpoints
    with each stage's part. A second run with the same command restores the latest global
    checkpoint on the same broker data (the channels outlived the first run) and the output
    stays exactly once."""
    import yaml
    from barrierflow.cli.main import main

    spec = two_stage_spec(tmp_path, KafkaEndpoint("unused", True))
    spec["channels"][0]["bootstrap"] = "embedded"
    for stage in spec["stages"]:
        if stage["sources"][0]["type"] == "generator":
            stage["sources"][0]["records_per_partition"] = 60
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")

    assert main(["run", str(path), "--until-exhausted", "--duration", "150"]) == 0
    out, err = capsys.readouterr()
    assert "pipeline two (2 stages, attempt 0):" in out and "embedded broker 127.0.0.1:" in out, out
    for stage in ("a", "b"):  # every stage's dead letters, as one stage's run prints them
        assert f"  stage {stage}: dead letters: 0 (file://{tmp_path / 'work'}/stages/{stage}/dead-letter)" in out, out
    progress = [line for line in err.splitlines() if line.startswith("a: batch=")]
    assert progress and " | b: batch=" in progress[-1] and "global_checkpoint=" in progress[-1], err
    assert "global_checkpoint=-" not in progress[-1]
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    assert sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True)) == [(p, o) for p in range(PARTITIONS) for o in range(60)]

    assert main(["checkpoints", "list", str(path), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["pipeline"] == "two" and list(listing["stages"]) == ["a", "b"] and listing["completed"]
    for manifest in listing["completed"]:
        assert set(manifest["stages"]) == {"a", "b"}
        assert manifest["stages"]["b"]["mode"] == "aligned" and manifest["stages"]["a"]["mode"] is None
        assert {"alignment_ms", "sync_ms", "async_ms", "channel_state_records"} <= set(manifest["stages"]["b"])
    assert main(["checkpoints", "list", str(path)]) == 0
    text = capsys.readouterr().out
    assert "align ms" in text and "chan recs" in text
    rows = [line.split() for line in text.splitlines()]
    assert any(row[:2] == ["b", "checkpoint"] and row[3] == "aligned" for row in rows), text
    assert any(row[:2] == ["a", "checkpoint"] and row[3] == "-" for row in rows), text

    assert (Path(spec["work_dir"]) / "embedded-broker" / "data").is_dir()
    assert main(["run", str(path), "--checkpoints", "1", "--duration", "150"]) == 0
    again = capsys.readouterr().out
    assert "embedded broker 127.0.0.1:" in again and "attempt 0" not in again, again
    table = read_committed(f"file://{tmp_path / 'out'}")
    assert table is not None
    assert sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      strict=True)) == [(p, o) for p in range(PARTITIONS) for o in range(60)]
    print(f"\nCLI run on the embedded broker:\n{out}{text}")
