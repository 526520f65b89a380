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
savepoint as it is; and an upgrade whose stage ``b`` also keeps ``max(value)`` rewrites ``b``'s
stored state (every key's count as the recount gives, ``value_max`` the declared default).

The same two-stage pipeline also shows the canary and the resumable steps in several stages: a
new spec whose stage ``b`` counts key 0 a thousand times fails its canary's deep verification
(the pipeline's expectation suite bounds every count), rolls back, and the old spec's rerun
still gives the exact totals; an upgrade killed right after its rewrite completes when the same
command runs again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_store import GlobalCheckpointStore
from barrierflow.checkpointing.manifest import CheckpointKind
from barrierflow.ops.savepoint import savepoint
from barrierflow.ops.upgrade import UpgradeNotSupportedError, UpgradeResult, upgrade
from barrierflow.pipeline.model import open_pipeline
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.sinks.parquet import read_committed
from barrierflow.spark import commit_log, offset_log
from barrierflow.spec import parse_staged_spec
from barrierflow.storage import open_store
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.upgrade.record import UpgradeStep, read_record

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.running_totals import assert_exactly_once, recount
from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec
from tests.support.window_counts import window_recount

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

SHUFFLE = "spark.sql.shuffle.partitions"
KEYS = 7  # two_stage_spec's generator
TOTALS = {"key": "long", "count": "long", "value_sum": "long"}
POISONED = "tests.verification.state_transforms:totals_with_a_poisoned_key"


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


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


def totals_pipeline(tmp_path: Path, endpoint: KafkaEndpoint) -> tuple[dict[str, Any], Path]:
    """two_stage_spec with running totals per key in ``b`` (RocksDB, 4 shuffle partitions) and
    input left after the first global checkpoint; its data and its spec file."""
    old = two_stage_spec(tmp_path, endpoint)
    old["spark"] = {"master": "local[2]", "shuffle_partitions": 4, "state_store": "rocksdb"}
    old["stages"][1]["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                          "output_mode": "update"}
    old["stages"][0]["sources"][0]["max_records_per_batch"] = 5  # input left after the first global checkpoint
    return old, write(tmp_path / "two.yaml", old)


def changed(tmp_path: Path, old: dict[str, Any], file: str, change: Any) -> tuple[dict[str, Any], Path]:
    """A copy of ``old`` changed by ``change(copy)``; the copy and its spec file."""
    new = json.loads(json.dumps(old))
    change(new)
    return new, write(tmp_path / file, new)


def test_one_stage_rescaled_and_one_added_keep_the_output_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, cli: Any) -> None:
    old, old_path = totals_pipeline(tmp_path, kafka_endpoint)
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
    assert_exactly_once(before_upgrade + after_upgrade, recount(PARTITIONS, RECORDS, KEYS))

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
        dropped = upgrade(new_path, back_path, dry_run=False, spark=spark, drop_stages=["c"], canary_checkpoints=0)
        assert isinstance(dropped, UpgradeResult) and dropped.dropped == ("c",) and dropped.rescaled == {}
        assert sorted(cuts.get(dropped.savepoint).stages) == ["a", "b"]
        # nothing to rewrite: restored as it is
        same = upgrade(back_path, back_path, dry_run=False, spark=spark, canary_checkpoints=0)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(same, UpgradeResult) and same.savepoint == same.source_savepoint == dropped.savepoint
    assert same.attempt > dropped.attempt and cuts.completed_ids()[-1] == dropped.savepoint

    # stage b's aggregation gains a value column: its stored state is rewritten with the default
    maxed = json.loads(json.dumps(back))
    maxed["stages"][1]["transformation"] = {
        "function": "barrierflow.transforms.aggregations:keyed_running_totals_with_max", "output_mode": "update",
        "state_defaults": {"value_max": -1}}
    maxed_path = write(tmp_path / "maxed.yaml", maxed)
    before = spark.conf.get(SHUFFLE)
    try:
        widened = upgrade(back_path, maxed_path, dry_run=False, spark=spark, canary_checkpoints=0)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(widened, UpgradeResult) and widened.source_savepoint == dropped.savepoint
    assert widened.value_columns == {"b": "added value_max (default -1)"}, widened.value_columns
    assert widened.rescaled == {} and sorted(cuts.get(widened.savepoint).stages) == ["a", "b"]
    code, out, err = cli("state", "query", str(maxed_path), "--stage", "b", "--checkpoint", str(widened.savepoint),
                         "--json", "--limit", "100")
    assert code == 0, err
    document = json.loads(out)
    assert not document["truncated"], document
    stored = {r["key_key"]: (r["value_count"], r["value_max"]) for r in document["preview"]}
    counts: dict[int, int] = {}
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            counts[(i * PARTITIONS + p) % KEYS] = counts.get((i * PARTITIONS + p) % KEYS, 0) + 1
    assert stored == {key: (n, -1) for key, n in counts.items()}, stored


@pytest.mark.slow(90)
def test_a_failing_canary_of_two_stages_rolls_back_and_the_old_spec_runs_exactly_once(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, cli: Any) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "totals", "expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "min_value": 1, "max_value": PARTITIONS * RECORDS}}]}))
    old, old_path = totals_pipeline(tmp_path, kafka_endpoint)
    old["verification"] = {"expectations": str(suite)}
    write(old_path, old)
    _, new_path = changed(tmp_path, old, "poisoned.yaml",
                          lambda new: new["stages"][1]["transformation"].update(function=POISONED))
    pipeline = open_pipeline(old_path)
    b = pipeline.stage("b")
    run(spark, old, checkpoints=1)
    source = savepoint(old_path).checkpoint_id

    code, _, err = cli("upgrade", str(old_path), "--to", str(new_path), "--canary-checkpoints", "1")
    assert code == 1 and "rolled back" in err and "of stage b failed the expectation check" in err, err
    record = read_record(pipeline.objects)
    assert record is not None and record.step is UpgradeStep.ROLLED_BACK and record.source_savepoint == source
    canary = {t.checkpoint_id: t.state for t in TransactionLedger(b.store.objects, b.spec.name).list()
              if t.checkpoint_id > source}
    assert canary and set(canary.values()) == {TxnState.ABORTED}, canary  # pre-committed, then aborted
    assert pipeline.cuts.completed_ids()[-1] == source

    run(spark, old, until_exhausted=True, duration=150)
    assert_exactly_once(updates(f"file://{tmp_path / 'out'}"), recount(PARTITIONS, RECORDS, KEYS))


@pytest.mark.slow(90)
def test_a_two_stage_upgrade_killed_after_its_rewrite_completes_when_run_again(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, cli: Any) -> None:
    from tests.drivers import short_lived_driver_env

    old, old_path = totals_pipeline(tmp_path, kafka_endpoint)
    new, new_path = changed(tmp_path, old, "rescaled.yaml", lambda new: new["stages"][1].update(shuffle_partitions=2))
    pipeline = open_pipeline(old_path)
    run(spark, old, checkpoints=1)
    source = savepoint(old_path).checkpoint_id
    command = ("upgrade", str(old_path), "--to", str(new_path), "--canary-checkpoints", "1")

    crash = {**os.environ, **short_lived_driver_env(), "BARRIERFLOW_CRASH_AT": "upgrade_after_rewrite"}
    killed = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", *command], env=crash,
                            capture_output=True, text=True, timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    record = read_record(pipeline.objects)
    assert record is not None and record.step is UpgradeStep.REWRITTEN
    rewritten = record.savepoint
    assert rewritten > source and sorted(pipeline.cuts.get(rewritten).stages) == ["a", "b"]
    code, _, err = cli("run", str(new_path), "--checkpoints", "1")  # nothing starts around the upgrade
    assert code == 2 and "unfinished upgrade" in err, err

    code, out, err = cli(*command, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["source_savepoint"] == source and document["savepoint"] == rewritten, document
    assert document["canary"]["attempts"] == 1 and len(document["canary"]["verified"]) == 1, document["canary"]
    assert read_record(pipeline.objects).step is UpgradeStep.CANARY_PASSED  # type: ignore[union-attr]

    run(spark, new, until_exhausted=True, duration=150)
    assert_exactly_once(updates(f"file://{tmp_path / 'out'}"), recount(PARTITIONS, RECORDS, KEYS))


WINDOWED = {"window_start": "timestamp", "window_end": "timestamp", "key": "long", "count": "long",
            "value_sum": "long"}


def windowed_pipeline(tmp_path: Path, endpoint: KafkaEndpoint, records: int, window: str) -> dict[str, Any]:
    """Generator -> stage ``a`` (per-key event-time window counts, RocksDB) -> channel ``ab`` ->
    stage ``b`` (a copy) -> Parquet; 100 ms of event time between a partition's records."""
    data = two_stage_spec(tmp_path, endpoint)
    data["spark"] = {"master": "local[2]", "shuffle_partitions": 2, "state_store": "rocksdb"}
    data["event_time"] = {"column": "event_time", "watermark_delay": "5s"}
    a, b = data["stages"]
    a["sources"][0].update({"records_per_partition": records, "max_records_per_batch": 200,
                            "event_time_step_ms": 100, "event_time_start": "2026-01-01T00:00:00+00:00"})
    a["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_window_counts",
                           "output_mode": "append", "options": {"window": window}}
    b["sources"][0]["json_fields"] = WINDOWED
    b["transformation"]["options"]["columns"] = {k: k for k in WINDOWED}
    return data


def stage_watermark(spec_path: Path, stage: str, batch: int) -> datetime:
    """The watermark batch ``batch`` of ``stage``'s local Spark checkpoint ran with."""
    millis = offset_log.read_offset_metadata(open_pipeline(spec_path).stage(stage).layout.spark_checkpoint,
                                             batch)["batchWatermarkMs"]
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def test_a_window_change_in_the_first_of_two_stages_rebuilds_its_state_from_the_input(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    first, total = 300, 800  # records per partition before the savepoint, in all (80 s of event time)
    old = windowed_pipeline(tmp_path, kafka_endpoint, total, "10 seconds")
    old_path = write(tmp_path / "old.yaml", old)
    run(spark, windowed_pipeline(tmp_path, kafka_endpoint, first, "10 seconds") | {"channels": old["channels"]},
        until_exhausted=True, duration=150)
    source = savepoint(old_path).checkpoint_id
    a_store = open_store(f"{old['checkpoint']['storage']}/stages/a")
    barrier_batch = json.loads(a_store.get_bytes(f"chk-{source}/_metadata.json"))["spark_batch_id"]
    watermark = stage_watermark(old_path, "a", barrier_batch)

    new = json.loads(json.dumps(old))
    new["stages"][0]["transformation"]["options"]["window"] = "20 seconds"
    new_path = write(tmp_path / "new.yaml", new)
    before = spark.conf.get(SHUFFLE)
    try:
        report = upgrade(old_path, new_path, dry_run=True, spark=spark)
        assert report.verdict.value == "needs rewrite", report.as_dict()
        result = upgrade(old_path, new_path, dry_run=False, spark=spark, canary_checkpoints=0)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(result, UpgradeResult)
    assert list(result.rebuilt) == ["a"] and result.rescaled == {} and result.source_savepoint == source, \
        result.as_dict()

    run(spark, new, until_exhausted=True, duration=150)
    last = commit_log.latest_committed(open_pipeline(new_path).stage("a").layout.spark_checkpoint)
    assert last is not None
    final = stage_watermark(new_path, "a", last)
    rows = updates(f"file://{tmp_path / 'out'}")
    by_width: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_width.setdefault(int((row["window_end"] - row["window_start"]).total_seconds()), []).append(row)
    assert set(by_width) == {10, 20}, set(by_width)
    for width, closes in ((10, lambda end: end <= watermark), (20, lambda end: watermark < end <= final)):
        got = [((r["key"], r["window_start"].replace(tzinfo=UTC)), (r["count"], r["value_sum"]))
               for r in by_width[width]]
        assert len(got) == len(dict(got)), "a window written twice"
        counted = window_recount(parse_staged_spec(old).stages[0].sources[0], total, width)  # type: ignore[arg-type]
        expected = {k: v for k, v in counted.items()
                    if closes(k[1] + timedelta(seconds=width))}
        assert len({k[1] for k in expected}) >= 2, (width, watermark, final)  # windows of two periods at least
        assert dict(got) == expected, (width, watermark, final, sorted(set(dict(got)) ^ set(expected))[:10])


def test_a_stage_checkpoint_of_a_cut_left_incomplete_is_left_out_of_the_upgrades_timeline(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path) -> None:
    """A stop can leave a stage's part of a cut that never completed, newer than the savepoint
    (stage ``b`` stored its checkpoint, ``a`` did not): the new savepoint continues the source's
    timeline, so that part is abandoned and the new cut's offsets are not compared with its
    offsets, which are ahead (the new cut failed its offsets-monotonic check before)."""
    old, old_path = totals_pipeline(tmp_path, kafka_endpoint)
    _, new_path = changed(tmp_path, old, "rescaled.yaml", lambda new: new["stages"][1].update(shuffle_partitions=2))
    pipeline = open_pipeline(old_path)
    run(spark, old, checkpoints=1)
    source = savepoint(old_path).checkpoint_id
    b = pipeline.stage("b").store
    part = json.loads(b.objects.get_bytes(f"chk-{source}/_metadata.json"))  # b's part of cut source + 1
    part["checkpoint_id"] = source + 1
    part["barrier_offsets"] = {s: {p: o + 5 for p, o in offsets.items()}
                               for s, offsets in part["barrier_offsets"].items()}
    b.objects.put_bytes(f"chk-{source + 1}/_metadata.json", json.dumps(part).encode())
    assert source + 1 in b.checkpoint_ids() and source + 1 not in pipeline.cuts.completed_ids()
    before = spark.conf.get(SHUFFLE)
    try:
        result = upgrade(old_path, new_path, dry_run=False, spark=spark, canary_checkpoints=0)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert isinstance(result, UpgradeResult) and result.source_savepoint == source, result
    assert result.savepoint > source + 1 and source + 1 in b.abandoned() and source not in b.abandoned()
