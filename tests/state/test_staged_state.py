"""``barrierflow state`` and ``upgrade --dry-run`` on a pipeline of two stages.

Stage ``a`` projects generator records into channel ``ab``; stage ``b`` keeps running totals
per key (the only state). ``--stage`` chooses the stage (required for query, diff and stats),
and the state of b after the run equals a recount of every generator record. The compatibility
report names a stage added (needs rewrite) and a stage with state removed (incompatible).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.ops.upgrade import upgrade
from barrierflow.runtime.pipeline import StagedPipelineJob
from barrierflow.spec import parse_staged_spec

from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, RECORDS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

SHUFFLE = "spark.sql.shuffle.partitions"
KEYS = 7  # two_stage_spec's generator


@dataclass
class Staged:
    tmp: Path
    path: Path
    data: dict[str, Any]


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def staged(spark: Any, kafka_endpoint: KafkaEndpoint, tmp_path_factory: pytest.TempPathFactory) -> Staged:
    tmp = tmp_path_factory.mktemp("staged-state")
    data = two_stage_spec(tmp, kafka_endpoint)
    data["stages"][1]["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                           "output_mode": "update"}
    before = spark.conf.get(SHUFFLE)
    try:
        result = StagedPipelineJob(parse_staged_spec(data), spark=spark).run(until_exhausted=True, duration=150)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert result.completed
    return Staged(tmp, write(tmp / "two.yaml", data), data)


def recount() -> dict[int, tuple[int, int]]:
    """key -> (count, sum) over every record of the bounded generator."""
    totals: dict[int, tuple[int, int]] = {}
    for p in range(PARTITIONS):
        for i in range(RECORDS):
            n = i * PARTITIONS + p
            key, value = n % KEYS, (n * 2654435761) % 1000
            count, total = totals.get(key, (0, 0))
            totals[key] = (count + 1, total + value)
    return totals


def test_stage_option_chooses_the_stage_with_state(staged: Staged, cli: Any) -> None:
    path = str(staged.path)
    code, out, err = cli("state", "schema", path, "--json")
    assert code == 0, err
    stages = json.loads(out)["stages"]
    assert stages["a"]["stateful"] is False and stages["a"]["operators"] == []
    (operator,) = stages["b"]["operators"]
    assert operator["key_columns"] == {"key_key": "bigint"}
    count = next(c for c in operator["value_columns"] if "count" in c)
    total = next(c for c in operator["value_columns"] if "sum" in c)

    code, out, err = cli("state", "query", path, "--stage", "b", "--limit", "100", "--json")
    assert code == 0, err
    rows = json.loads(out)["preview"]
    assert {r["key_key"]: (r[count], r[total]) for r in rows} == recount()

    code, _, err = cli("state", "query", path)
    assert code == 2 and "pipeline two has 2 stages: a, b" in err and "with state in global checkpoint" in err, err
    assert ": b)" in err and "--stage NAME" in err, err
    code, _, err = cli("state", "stats", path, "--stage", "a")
    assert code == 2 and "stage a of pipeline two keeps no state" in err and "the stages with state: b" in err, err
    code, _, err = cli("state", "diff", path, "--stage", "zz", "--from", "1", "--to", "2")
    assert code == 2 and "has no stage 'zz'" in err and "['a', 'b']" in err, err


def test_upgrade_names_a_stage_added_and_a_stage_with_state_removed(staged: Staged, spark: Any) -> None:
    """A third stage c behind b (b now writes channel bc): needs rewrite, naming stage c and
    channel bc; stage b replaced by a stage of another name: incompatible, naming b's state."""
    data = json.loads(json.dumps(staged.data))
    data["channels"].append({"name": "bc", "topic": f"{data['channels'][0]['topic']}-bc", "partitions": 2,
                             "bootstrap": data["channels"][0]["bootstrap"]})
    data["stages"][1]["sinks"] = [{"type": "channel", "channel": "bc"}]
    data["stages"].append({
        "name": "c",
        "sources": [{"type": "channel", "channel": "bc", "json_fields": {"key": "long", "count": "long",
                                                                         "value_sum": "long"}}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"key": "key", "count": "count", "value_sum": "value_sum"}}},
        "sinks": staged.data["stages"][1]["sinks"]})
    added = upgrade(staged.path, write(staged.tmp / "three.yaml", data), dry_run=True, spark=spark)
    assert added.verdict.value == "needs rewrite", added.as_dict()
    by_stage = {s.stage: s for s in added.stages}
    assert by_stage["a"].verdict.value == "compatible" and by_stage["c"].verdict.value == "needs rewrite"
    assert "stage c is new: it would start on empty state" in by_stage["c"].findings[0].reason
    assert [f.subject for f in added.graph] == ["channel bc"]

    renamed = json.loads(json.dumps(staged.data))
    renamed["stages"][1]["name"] = "totals"
    removed = upgrade(staged.path, write(staged.tmp / "renamed.yaml", renamed), dry_run=True, spark=spark)
    assert removed.verdict.value == "incompatible", removed.as_dict()
    by_stage = {s.stage: s for s in removed.stages}
    (finding,) = by_stage["b"].findings
    assert finding.verdict.value == "incompatible" and "the new spec has no stage b" in finding.reason
    assert "operator 0 (" in finding.reason and "would be dropped" in finding.reason
    assert by_stage["totals"].verdict.value == "needs rewrite"
