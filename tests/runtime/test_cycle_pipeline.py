"""A pipeline with a cycle (include/pipelines/cycle.yaml): back-edge logging at run time.

``ingest`` (generator) -> ``input`` -> ``loop`` -> ``forward`` -> ``bounce`` -> ``feedback`` ->
``loop`` (the back-edge), and ``forward`` -> ``store`` (Parquet through 2PC). ``bounce`` sends
each record round once, so the failure-free output holds every generated record twice, with
``hops`` 0 and 1.

``loop`` never waits for barriers on ``feedback``: it snapshots when ``input`` delivered barrier
n, and the records ``feedback`` brings between that snapshot and barrier n (which ``bounce``
forwards after its own snapshot n) are logged as back-edge channel-state ranges; the stage's
checkpoint n, and so global checkpoint n, completes only when that barrier arrived. A restore
re-reads those ranges from the channel (they were written before the barrier, so no attempt
fence skips them), and the records an older attempt wrote after a restored barrier are
skipped.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.cli.main import main
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec

from tests.scenarios.harness import FAST_JVM, assert_sub_multiset, crashed_run
from tests.support.kafka_broker import KafkaEndpoint, partition_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(75)]
REPO_SPEC = Path(__file__).resolve().parents[2] / "include" / "pipelines" / "cycle.yaml"
RECORDS = 300


def cycle_spec(tmp_path: Path, endpoint: KafkaEndpoint) -> dict[str, Any]:
    """The repo's cycle demo on the test broker, with unique topics, paths under ``tmp_path``,
    smaller batches and a shorter checkpoint interval."""
    data = yaml.safe_load(REPO_SPEC.read_text(encoding="utf-8"))
    suffix = uuid.uuid4().hex[:8]
    data["work_dir"] = str(tmp_path / "work")
    # The demo opts into the chaos DAG with embedded channels; on a real cluster that opt-in
    # needs a scratch cluster (refused at load), and this test runs no chaos DAG.
    data.pop("chaos", None)
    for channel in data["channels"]:
        channel.update(topic=f"{channel['name']}-{suffix}", bootstrap=endpoint.bootstrap_servers)
    generator = data["stages"][0]["sources"][0]
    generator.update(records_per_partition=RECORDS, max_records_per_batch=30)
    for stage in data["stages"][1:]:
        for source in stage["sources"]:
            source["max_records_per_batch"] = 60
    data["stages"][-1]["sinks"][0]["path"] = f"file://{tmp_path / 'out'}"
    data["trigger"] = {"interval": "100ms"}
    data["checkpoint"].update(storage=f"file://{tmp_path / 'chk'}", interval="700ms")
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM}
    return data


def _output(tmp_path: Path) -> list[tuple[int, int, int]]:
    table = read_committed(f"file://{tmp_path / 'out'}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(),
                      table.column("hops").to_pylist(), strict=True))


def _barrier_triggers(endpoint: KafkaEndpoint, topic: str) -> dict[tuple[int, int], set[int | None]]:
    """(attempt, checkpoint id) -> the trigger times the barrier records of ``topic`` (2
    partitions) carry."""
    from barrierflow.barriers.records import decode_barrier

    found: dict[tuple[int, int], set[int | None]] = {}
    for number in range(2):
        for record in partition_records(endpoint, topic, number):
            marker = decode_barrier(record.headers)
            if marker is not None:
                found.setdefault((marker.attempt, marker.checkpoint_id), set()).add(marker.triggered_ms)
    return found


def test_cycle_pipeline_logs_back_edge_ranges_and_restores_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        figures: dict[str, object]) -> None:
    """A driver SIGKILLed right after global checkpoint 2 completed (the coordinator had not
    yet told ``store``'s sink to commit), then a run to the end of the source, which restores
    that global checkpoint: every record is committed exactly twice (hops 0 and 1), the
    checkpoints completed (no deadlock on the cycle), ``loop``'s manifests carry back-edge
    channel state on ``feedback`` only (aligned mode: ``input`` is never channel state), and
    ``checkpoints show`` / ``verify`` work on them."""
    data = cycle_spec(tmp_path, kafka_endpoint)
    spec_path = tmp_path / "cycle.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    spec = parse_staged_spec(data)
    feedback = spec.channel("feedback").topic_for(spec.name)
    expected = sorted((p, o, h) for p in range(2) for o in range(RECORDS) for h in (0, 1))

    crashed = crashed_run(spec_path, "after_global_manifest@2", timeout=400)
    assert crashed.returncode == -9, f"the driver did not reach its second global checkpoint:\n{crashed.stderr[-3000:]}"
    chk = tmp_path / "chk"
    assert sorted(p.parent.name for p in chk.glob("global/chk-*/_metadata.json")) == ["chk-1", "chk-2"]
    assert_sub_multiset(_output(tmp_path), expected, "the kill after global checkpoint 2")

    final = StagedPipelineJob(spec, spark=spark, spec_path=str(spec_path)).run(until_exhausted=True, duration=400)
    assert final.completed, "no global checkpoint completed after the restore (a deadlock on the cycle?)"
    rows = _output(tmp_path)
    figures.update({"rows": len(rows), "rows lost": len(set(expected) - set(rows)),
                    "rows duplicated": len(rows) - len(set(rows))})
    assert rows == expected

    # Barriers forwarded by loop (on ``forward``) carry their global checkpoint's trigger time,
    # which loop's barrier batches took from the barriers ingest wrote on ``input``.
    forwarded = _barrier_triggers(kafka_endpoint, spec.channel("forward").topic_for(spec.name))
    for path in chk.glob("global/chk-*/_metadata.json"):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        triggered_ms = round(datetime.fromisoformat(manifest["trigger_time"]).timestamp() * 1000)
        assert forwarded[(manifest["attempt"], manifest["checkpoint_id"])] == {triggered_ms}, manifest

    # Back-edge logging in loop's manifests of every completed global checkpoint.
    job = StagedPipelineJob.offline(spec, spec_path=str(spec_path))
    loop = next(j for j in job.stages if j.stage.name == "loop")
    manifests: list[Manifest] = [loop.store.get(n) for n in job.global_checkpoints()]
    logged = []
    for manifest in manifests:
        alignment = manifest.alignment
        assert alignment is not None and alignment.mode == "aligned"
        assert set(alignment.barrier_offsets) == {f"{t}:{p}" for t in (spec.channel("input").topic_for(spec.name),
                                                                       feedback) for p in (0, 1)}
        for entry in alignment.channel_state:
            assert entry.back_edge and entry.partition.startswith(f"{feedback}:"), entry
            assert entry.end == alignment.barrier_offsets[entry.partition] and entry.start < entry.end
            logged.append((manifest.checkpoint_id, entry.partition, entry.records))
    with_records = [entry for entry in logged if entry[2] > 0]
    assert with_records, f"no global checkpoint logged back-edge records: {logged}"
    figures["back-edge ranges (checkpoint, partition, records)"] = str(with_records)

    # `checkpoints show` marks them; `verify` checks every global checkpoint's cut.
    shown = with_records[0][0]
    capsys.readouterr()
    assert main(["checkpoints", "show", str(spec_path), str(shown)]) == 0
    out = capsys.readouterr().out
    assert f"channel state {with_records[0][1]}" in out and "(back-edge)" in out, out
    assert main(["verify", str(spec_path), "--json"]) == 0, capsys.readouterr()
    results = json.loads(capsys.readouterr().out)
    print(f"\ncycle: global checkpoints {job.global_checkpoints()}; back-edge ranges with records {with_records}; "
          f"verify: {json.dumps(results)[:300]}")
