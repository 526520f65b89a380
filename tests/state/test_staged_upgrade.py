"""``barrierflow upgrade`` of a pipeline of several stages: one stage rescaled, one added, one dropped.

Stage ``a`` projects generator records into channel ``ab``; stage ``b`` keeps running totals per
key (RocksDB state, 4 shuffle partitions) and writes them to Parquet. After two global
checkpoints the newest is made a savepoint, and the pipeline is upgraded to three stages: ``b``
at 2 shuffle partitions (``stages[].shuffle_partitions``; ``a`` keeps the pipeline's 4) writing
channel ``bc``, and a new stage ``c`` copying ``bc`` to another Parquet folder. The upgraded
pipeline runs to the end of its bounded input. The updates committed before the upgrade (by
``b``) and after it (by ``c``) hold no update twice and end at the totals an independent recount
of the generator's records gives: the rescaled state carried every key exactly once across the
new stage. The three-stage pipeline is then savepointed and upgraded back without ``c``, which
is refused until ``--drop-stage c`` names it; an upgrade that changes nothing restores that
savepoint as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.ops.savepoint import savepoint
from barrierflow.ops.upgrade import UpgradeNotSupportedError, UpgradeResult, upgrade
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import parse_staged_spec
from barrierflow.storage import open_store

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

SHUFFLE = "spark.sql.shuffle.partitions"
KEYS = 7  # two_stage_spec's generator
TOTALS = {"key": "long", "count": "long", "value_sum": "long"}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def recount() -> dict[int, tuple[int, int]]:
    """key -> (count, sum) over every record of the bounded generator."""
    totals: dict[int, tuple[int, int]] = {}
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            n = i * PARTITIONS + p
            count, total = totals.get(n % KEYS, (0, 0))
            totals[n % KEYS] = (count + 1, total + (n * 2654435761) % 1000)
    return totals


def run(spark: Any, data: dict[str, Any], **limits: Any) -> None:
    before = spark.conf.get(SHUFFLE)
    try:
        result = StagedPipelineJob(parse_staged_spec(data), spark=spark).run(**limits)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert result.completed


def updates(uri: str) -> list[dict[str, Any]]:
    table = read_committed(uri)
    return [] if table is None else table.to_pylist()


def test_one_stage_rescaled_and_one_added_keep_the_output_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    old = two_stage_spec(tmp_path, kafka_endpoint)
    old["spark"] = {"master": "local[2]", "shuffle_partitions": 4, "state_store": "rocksdb"}
    old["stages"][1]["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                          "output_mode": "update"}
    old["stages"][0]["sources"][0]["max_records_per_batch"] = 5  # input left after the first global checkpoint
    old_path = write(tmp_path / "two.yaml", old)
    new = json.loads(json.dumps(old))
    channel = new["channels"][0]
    new["channels"].append({"name": "bc", "topic": f"{channel['topic']}-bc", "partitions": 2,
                            "bootstrap": channel["bootstrap"]})
    new["stages"][1]["sinks"] = [{"type": "channel", "channel": "bc"}]
    new["stages"][1]["shuffle_partitions"] = 2
    new["stages"].append({
        "name": "c", "sources": [{"type": "channel", "channel": "bc", "json_fields": TOTALS}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {k: k for k in TOTALS}}},
        "sinks": [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out-c'}"}]})
    new_path = write(tmp_path / "three.yaml", new)
    cuts = GlobalCheckpointStore(open_store(old["checkpoint"]["storage"]), "two")

    run(spark, old, checkpoints=1)
    source = savepoint(old_path).checkpoint_id
    stage_store = {s: f"{old['checkpoint']['storage']}/stages/{s}" for s in ("a", "b", "c")}
    a_store, b_store = (open_store(stage_store[s]) for s in ("a", "b"))
    offsets = json.loads(a_store.get_bytes(f"chk-{source}/_metadata.json"))["barrier_offsets"]["events"]
    assert all(0 < o < RECORDS for o in offsets.values()), f"no input on one side of the upgrade: {offsets}"
    untouched = {s: store.get_bytes(f"chk-{source}/_metadata.json") for s, store in (("a", a_store), ("b", b_store))}

    before = spark.conf.get(SHUFFLE)
    try:
        result = upgrade(old_path, new_path, dry_run=False, spark=spark)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(result, UpgradeResult)
    assert result.source_savepoint == source and result.savepoint > source, result.as_dict()
    assert result.rescaled == {"b": (4, 2)} and result.added == ("c",) and result.dropped == ()
    made = cuts.get(result.savepoint)
    assert sorted(made.stages) == ["a", "b", "c"]
    for name, store in (("a", a_store), ("b", b_store)):  # NO_CLAIM: the source savepoint is never changed
        assert store.get_bytes(f"chk-{source}/_metadata.json") == untouched[name]
    b_made = json.loads(b_store.get_bytes(f"chk-{result.savepoint}/_metadata.json"))
    assert b_made["kind"] == CheckpointKind.SAVEPOINT.value
    partitions = {f["path"].split("/")[2] for f in b_made["files"] if f["path"].startswith("state/0/")}
    assert {int(p) for p in partitions if p.isdigit()} == {0, 1}
    assert b_made["alignment"]["barrier_checkpoint_id"] == source
    c_made = json.loads(open_store(stage_store["c"]).get_bytes(f"chk-{result.savepoint}/_metadata.json"))
    assert c_made["files"] == [] and c_made["spark_batch_id"] == -1
    before = spark.conf.get(SHUFFLE)
    try:  # the new cut fits the new spec as it is
        fits = upgrade(new_path, new_path, dry_run=True, checkpoint_id=result.savepoint, spark=spark)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert fits.verdict.value == "compatible", fits.as_dict()

    run(spark, new, until_exhausted=True, duration=150)
    before_upgrade, after_upgrade = updates(f"file://{tmp_path / 'out'}"), updates(f"file://{tmp_path / 'out-c'}")
    assert before_upgrade and after_upgrade, "both sides of the upgrade committed output"
    seen = [(r["key"], r["count"]) for r in before_upgrade + after_upgrade]
    assert len(seen) == len(set(seen)), "an update was written twice"
    final: dict[int, tuple[int, int]] = {}
    for r in before_upgrade + after_upgrade:
        if r["count"] > final.get(r["key"], (0, 0))[0]:
            final[r["key"]] = (r["count"], r["value_sum"])
    assert final == recount()

    # the three stages back to two: stage c's removal is refused until named
    back = json.loads(json.dumps(old))
    back["stages"][1]["shuffle_partitions"] = 2
    back_path = write(tmp_path / "back.yaml", back)
    three = savepoint(new_path).checkpoint_id
    before = spark.conf.get(SHUFFLE)
    try:
        with pytest.raises(UpgradeNotSupportedError, match=r"removes stage c of pipeline two.*add --drop-stage c"):
            upgrade(new_path, back_path, dry_run=False, spark=spark)
        assert cuts.completed_ids()[-1] == three
        dropped = upgrade(new_path, back_path, dry_run=False, spark=spark, drop_stages=["c"])
        assert isinstance(dropped, UpgradeResult) and dropped.dropped == ("c",) and dropped.rescaled == {}
        assert sorted(cuts.get(dropped.savepoint).stages) == ["a", "b"]
        same = upgrade(back_path, back_path, dry_run=False, spark=spark)  # nothing to rewrite: restored as it is
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(same, UpgradeResult) and same.savepoint == same.source_savepoint == dropped.savepoint
    assert same.attempt > dropped.attempt and cuts.completed_ids()[-1] == dropped.savepoint
