"""The upgrade canary's stream-vs-batch comparison for a Kafka source: the windows the canary's
checkpoints closed are compared with the new spec's transformation run as a batch query over
exactly the offsets those checkpoints read (from the barrier offsets of the savepoint it was
restored from to those of its last cut, read again with Spark's Kafka batch source and decoded as
the stream decodes them), and the canary rolls back when they differ.

The pipeline (:mod:`tests.batch.kafka_lake`) reads the first part of the topic and is
savepointed; the rest of the topic is then produced, so the canary has input whose windows close
while it runs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from barrierflow.batch.recompute import CANARY_RECOMPUTE_REPORT_KEY
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.savepoint import savepoint
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from barrierflow.upgrade.record import UpgradeStep, read_record

from tests.batch.kafka_lake import PARTITIONS, RECORDS, kafka_spec, produce
from tests.support.in_session_runs import run_spec as run
from tests.support.kafka_broker import KafkaEndpoint, create_topic
from tests.support.windowed_canary import DOUBLED_WHEN_STREAMING

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900)]

#: Records per partition read before the savepoint (the rest, to RECORDS, are the canary's).
FIRST = 150


def _suite(folder: Path) -> Path:
    suite = folder / "suite.json"
    suite.write_text(json.dumps({"name": "windows", "expectations": [
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "value_count", "min_value": 1, "max_value": 100}}]}))
    return suite


def savepointed(spark: Any, endpoint: KafkaEndpoint, tmp: Path, suite: Path | None
                ) -> tuple[str, Path, CheckpointStore, int]:
    """The pipeline run over the first FIRST records of every partition and savepointed; then the
    rest of the topic is produced. Returns the topic, the old spec, its store and the savepoint."""
    topic = f"kc-{uuid.uuid4().hex[:10]}"
    create_topic(endpoint, topic, PARTITIONS)
    produce(endpoint, topic, 0, FIRST)
    name = f"kc{uuid.uuid4().hex[:8]}"
    old = kafka_spec(tmp, "old.yaml", endpoint, topic, name=name, suite=suite)
    run(spark, old, until_exhausted=True, duration=120)
    store = CheckpointStore.for_spec(load_spec(old))
    taken = savepoint(old).checkpoint_id
    produce(endpoint, topic, FIRST, RECORDS)
    return topic, old, store, taken


@pytest.mark.slow(60)
def test_a_kafka_canary_compares_the_offsets_its_checkpoints_read_with_the_batch_recomputation(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, cli: Any) -> None:
    topic, old, store, source = savepointed(spark, kafka_endpoint, tmp_path, _suite(tmp_path))
    new = kafka_spec(tmp_path, "new.yaml", kafka_endpoint, topic, name=load_spec(old).name, suite=_suite(tmp_path))

    code, out, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "3", "--json")

    assert code == 0, err
    canary = json.loads(out)["canary"]
    assert canary["deep_verification"] == "passed deep verification", canary
    comparison = canary["comparison"]
    assert comparison["ran"] and comparison["verdict"] == "matched", comparison
    assert comparison["stream_rows"] == comparison["batch_rows"] > 0 and comparison["differences"] == 0, comparison
    [compared] = comparison["outputs"]
    assert compared["checkpoint_id"] == canary["verified"][-1] and min(compared["held_epochs"]) > source, compared
    stored = json.loads(store.objects.get_bytes(CANARY_RECOMPUTE_REPORT_KEY))
    [ranges] = stored["source_ranges"].values()
    # exactly the offsets the canary read: from the savepoint's barrier to its last cut's
    restored_from = max(m.checkpoint_id for m in store.completed() if m.checkpoint_id < canary["verified"][0])
    assert ranges["from"] == f"checkpoint {restored_from}", ranges
    assert ranges["ranges"] == {
        key: [store.get(restored_from).barrier_offsets["events"][key], end]
        for key, end in store.get(canary["verified"][-1]).barrier_offsets["events"].items()}, ranges
    assert all(start == FIRST for start, _ in ranges["ranges"].values()), ranges
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.CANARY_PASSED and record.comparison == comparison
    assert record.comparison["stream_rows"] == compared["stream_rows"]  # the record shows the counts


@pytest.mark.slow(60)
def test_a_kafka_canary_whose_output_differs_from_the_batch_rolls_back_and_says_the_suite_was_skipped(
        spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path: Path, cli: Any) -> None:
    topic, old, store, source = savepointed(spark, kafka_endpoint, tmp_path, None)
    new = kafka_spec(tmp_path, "new.yaml", kafka_endpoint, topic, name=load_spec(old).name,
                     function=DOUBLED_WHEN_STREAMING)

    code, _, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "3")

    assert code == 1, err
    assert "rolled back" in err and "the stream-vs-batch comparison of sink out failed" in err, err
    assert "changed: window [window_start=" in err, err  # the first differences, named
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.ROLLED_BACK, record
    assert record.verified and record.deep_verification.startswith(
        "no expectation suite: deep verification skipped"), record  # never "passed deep verification"
    assert record.comparison["verdict"] == "differed" and record.comparison["differences"] > 0, record.comparison
    canary = {t.checkpoint_id: t.state for t in TransactionLedger(store.objects, record.pipeline).list()
              if t.checkpoint_id > source}
    assert canary and set(canary.values()) == {TxnState.ABORTED}, canary  # held, then aborted
