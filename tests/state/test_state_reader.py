"""``barrierflow state`` and ``barrierflow upgrade --dry-run`` on a single-stage pipeline.

One keyed-totals pipeline (generator -> running count and sum per key -> Parquet) runs to the
end of its bounded input once per module, taking several checkpoints. What the state commands
read from a checkpoint is checked against an independent recount from the generator's formula
up to that checkpoint's barrier offsets; the checkpoint store and the live Spark checkpoint are
unchanged by every read. The compatibility report is checked for an unchanged spec, more
shuffle partitions, a changed grouping key and an added value column.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.manifest import Manifest
from barrierflow.ops.upgrade import upgrade
from barrierflow.runtime.job import StreamingJob
from barrierflow.spec import load_spec

pytestmark = pytest.mark.spark

SHUFFLE = "spark.sql.shuffle.partitions"
#: 800 records over 700 keys, 200 a batch: a key's first record comes within the first 700, keys
#: below 100 get a second one after that, so from a checkpoint of the first three batches to the
#: last one there are keys added and keys changed.
PARTITIONS, RECORDS, KEYS = 2, 400, 700


def totals_spec(tmp: Path) -> dict[str, Any]:
    return {
        "version": 1,
        "name": f"st{uuid.uuid4().hex[:6]}",
        "work_dir": str(tmp / "work"),
        "sources": [{"name": "events", "type": "generator", "partitions": PARTITIONS, "rows_per_second": 0,
                     "max_records_per_batch": 100, "records_per_partition": RECORDS, "keys": KEYS}],
        "transformation": {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                           "output_mode": "update"},
        "sinks": [{"name": "results", "type": "parquet", "path": f"file://{tmp / 'out'}"}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp / 'checkpoints'}", "interval": "200ms", "timeout": "120s"},
        "spark": {"master": "local[2]", "shuffle_partitions": 4},
    }


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def recount(manifest: Manifest) -> dict[int, tuple[int, int]]:
    """key -> (count, sum of value) of every generator record before the checkpoint's barrier
    offsets, from the generator's formula (key = n % keys, value = n * 2654435761 % 1000 with
    n = i * partitions + p)."""
    totals: dict[int, tuple[int, int]] = {}
    for partition, end in manifest.barrier_offsets["events"].items():
        p = int(partition)
        for i in range(end):
            n = i * PARTITIONS + p
            key, value = n % KEYS, (n * 2654435761) % 1000
            count, total = totals.get(key, (0, 0))
            totals[key] = (count + 1, total + value)
    return totals


def files_of(*roots: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass
class Totals:
    tmp: Path
    path: Path
    data: dict[str, Any]
    completed: list[Manifest]

    def variant(self, name: str, change: dict[str, Any]) -> Path:
        """The spec with top-level ``change`` merged one level deep, written beside it."""
        data = json.loads(json.dumps(self.data))
        for key, value in change.items():
            data[key] = {**data[key], **value} if isinstance(value, dict) else value
        return write(self.tmp / f"{name}.yaml", data)


@pytest.fixture(scope="module")
def totals(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Totals:
    tmp = tmp_path_factory.mktemp("state")
    data = totals_spec(tmp)
    path = write(tmp / "pipeline.yaml", data)
    before = spark.conf.get(SHUFFLE)
    try:
        result = StreamingJob(load_spec(path), spark=spark, spec_path=str(path)).run(until_exhausted=True,
                                                                                     duration=150)
    finally:
        spark.conf.set(SHUFFLE, before)
    assert len(result.completed) >= 2, "the run took fewer than two checkpoints"
    assert recount(result.completed[0]) != recount(result.completed[-1])
    return Totals(tmp, path, data, list(result.completed))


def test_schema_names_the_operator_its_partitions_and_schemas(totals: Totals, cli: Any) -> None:
    code, out, err = cli("state", "schema", str(totals.path), "--json")
    assert code == 0, err
    document = json.loads(out)
    name = totals.data["name"]
    assert document["checkpoint_id"] == totals.completed[-1].checkpoint_id
    (operator,) = document["stages"][name]["operators"]
    assert operator["operator_id"] == 0 and operator["partitions"] == 4 and operator["stores"] == ["default"]
    assert operator["key_columns"] == {"key_key": "bigint"}, operator
    assert operator["value_columns"] == {"value_count": "bigint", "value_sum": "bigint"}, operator
    code, out, _ = cli("state", "schema", str(totals.path))
    assert code == 0 and "operator 0" in out and "key:   struct<key:bigint>" in out, out


def test_query_of_any_checkpoint_matches_a_recount(totals: Totals, cli: Any, spark: Any) -> None:
    """The newest checkpoint written whole to Parquet through --sql, and the oldest one's
    bounded preview: both equal the recount up to their barrier offsets; reading changed
    neither the store nor the live Spark checkpoint."""
    untouched = files_of(totals.tmp / "checkpoints", totals.tmp / "work" / "spark-checkpoint")
    count, total = "value_count", "value_sum"  # Spark's names of the aggregation buffer (schema test)
    target = totals.tmp / "newest.parquet"
    code, out, err = cli("state", "query", str(totals.path), "--sql",
                         f"SELECT key_key AS key, {count} AS n, {total} AS s FROM state", "--output", str(target),
                         "--json")
    assert code == 0, err
    assert json.loads(out)["rows"] == KEYS
    written = {r["key"]: (r["n"], r["s"]) for r in spark.read.parquet(str(target)).collect()}
    assert written == recount(totals.completed[-1])

    first = totals.completed[0]
    code, out, err = cli("state", "query", str(totals.path), "--checkpoint", str(first.checkpoint_id),
                         "--limit", "1000", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["batch_id"] == first.spark_batch_id and not document["truncated"]
    assert {r["key_key"]: (r[count], r[total]) for r in document["preview"]} == recount(first)
    code, out, _ = cli("state", "query", str(totals.path), "--limit", "3", "--json")
    preview = json.loads(out)
    assert len(preview["preview"]) == 3 and preview["truncated"] and preview["rows"] == KEYS
    assert files_of(totals.tmp / "checkpoints", totals.tmp / "work" / "spark-checkpoint") == untouched


def test_diff_between_two_checkpoints_matches_a_recount(totals: Totals, cli: Any, spark: Any) -> None:
    first, last = totals.completed[0], totals.completed[-1]
    old, new = recount(first), recount(last)
    added = set(new) - set(old)
    changed = {k for k in set(new) & set(old) if new[k] != old[k]}
    assert added and changed
    target = totals.tmp / "diff.json"
    code, out, err = cli("state", "diff", str(totals.path), "--from", str(first.checkpoint_id), "--to",
                         str(last.checkpoint_id), "--sample", "3", "--output", str(target), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["counts"] == {"added": len(added), "changed": len(changed), "removed": 0}
    assert len(document["samples"]["added"]) == 3 and document["samples"]["removed"] == []
    rows = spark.read.json(str(target)).collect()
    count = next(c for c in rows[0].asDict() if c.startswith("new_") and "count" in c)
    total = next(c for c in rows[0].asDict() if c.startswith("new_") and "sum" in c)
    assert {r["key_key"] for r in rows if r["change"] == "added"} == added
    assert {r["key_key"] for r in rows if r["change"] == "changed"} == changed
    assert all((r[count], r[total]) == new[r["key_key"]] for r in rows)
    assert all((r[count.replace("new_", "old_")], r[total.replace("new_", "old_")]) == old[r["key_key"]]
               for r in rows if r["change"] == "changed")


def test_stats_count_keys_and_bytes_per_partition_and_growth(totals: Totals, cli: Any) -> None:
    code, out, err = cli("state", "stats", str(totals.path), "--top", "4", "--json")
    assert code == 0, err
    stats = json.loads(out)
    assert [p["partition"] for p in stats["partitions"]] == [0, 1, 2, 3]
    assert stats["keys"] == KEYS == sum(p["keys"] for p in stats["partitions"])
    last = totals.completed[-1]
    partition_files = {f.path: f.size for f in last.files if re.match(r"state/0/\d+/", f.path)}
    assert stats["bytes"] == sum(partition_files.values()) > 0
    assert all(p["bytes"] > 0 for p in stats["partitions"] if p["keys"])
    sizes = [row["bytes"] for row in stats["largest"]]
    assert len(sizes) == 4 and sizes == sorted(sizes, reverse=True)
    growth = stats["growth"]
    assert [g["checkpoint_id"] for g in growth] == [m.checkpoint_id for m in totals.completed]
    assert growth[-1]["state_bytes"] == stats["bytes"] and growth[0]["change"] is None
    code, out, _ = cli("state", "stats", str(totals.path))
    assert code == 0 and "largest keys" in out and "growth" in out, out


def test_errors_name_the_thing_and_the_fix(totals: Totals, cli: Any, tmp_path: Path) -> None:
    path = str(totals.path)
    code, _, err = cli("state", "query", path, "--checkpoint", "999")
    assert code == 2 and "checkpoint 999" in err and "completed: [" in err, err
    code, _, err = cli("state", "stats", path, "--operator", "7")
    assert code == 2 and "no stateful operator 7" in err and "operator 0 (" in err, err
    code, _, err = cli("state", "query", path, "--output", str(tmp_path / "rows.csv"))
    assert code == 2 and ".parquet or .json" in err, err

    never = totals_spec(tmp_path)
    code, _, err = cli("state", "schema", str(write(tmp_path / "never.yaml", never)))
    assert code == 2 and f"pipeline {never['name']} has no completed checkpoint" in err and "run it first" in err, err

    # a copy of the store with one state file altered: refused naming the checkpoint and the file
    copy = tmp_path / "copy"
    shutil.copytree(totals.tmp / "checkpoints", copy)
    last = totals.completed[-1]
    victim = next(f for f in last.files if f.path.startswith("state/") and f.size > 0)
    stored = next(copy.rglob(victim.sha256))
    stored.write_bytes(b"not a state file")
    damaged = write(tmp_path / "damaged.yaml", {**totals.data, "work_dir": str(tmp_path / "w"),
                                                 "checkpoint": {**totals.data["checkpoint"],
                                                                "storage": f"file://{copy}"}})
    code, _, err = cli("state", "query", str(damaged))
    assert code == 2 and f"checkpoint {last.checkpoint_id}: file state/" in err and "is altered" in err, err

    code, _, err = cli("upgrade", path, "--to", path)
    assert code == 2 and "no savepoint to upgrade from" in err and f"barrierflow stop {path} --savepoint" in err, err
    assert "Nothing was changed" in err, err


def _verdicts(report: Any) -> list[tuple[str, str]]:
    return [(f.verdict.value, f"{f.subject}: {f.reason}") for s in report.stages for f in s.findings]


def test_upgrade_dry_run_verdicts(totals: Totals, spark: Any, cli: Any) -> None:
    """(a) no change: compatible; (b) shuffle partitions 4 -> 8: needs rewrite (rescale);
    (c) grouping key changed: incompatible naming the operator; (d) a value column added:
    needs rewrite naming it."""
    name = totals.data["name"]
    same = totals.variant("same", {})
    code, out, err = cli("upgrade", str(totals.path), "--to", str(same), "--dry-run", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["verdict"] == "compatible", report
    assert report["checkpoint_id"] == totals.completed[-1].checkpoint_id
    assert report["stages"][0]["operators"][0]["partitions"] == 4

    wider = totals.variant("wider", {"spark": {"shuffle_partitions": 8}})
    result = upgrade(totals.path, wider, dry_run=True, spark=spark)
    assert result.verdict.value == "needs rewrite", _verdicts(result)
    (finding,) = result.stages[0].findings
    assert finding.subject == f"stage {name} shuffle partitions" and "4 -> 8" in finding.reason, finding
    assert "rescale" in finding.reason

    regrouped = totals.variant("regrouped", {"transformation": {
        "function": "tests.support.state_transforms:totals_by_partition"}})
    code, out, err = cli("upgrade", str(totals.path), "--to", str(regrouped), "--dry-run")
    assert code == 1, err
    assert "INCOMPATIBLE" in out and f"stage {name} operator 0 (" in out and "grouping keys changed" in out, out
    assert "[key: bigint] -> [partition: int]" in out and "would be dropped" in out, out

    wider_value = totals.variant("max", {"transformation": {
        "function": "tests.support.state_transforms:totals_with_max"}})
    result = upgrade(totals.path, wider_value, dry_run=True, spark=spark)
    assert result.verdict.value == "needs rewrite", _verdicts(result)
    (finding,) = result.stages[0].findings
    assert "value column added: max(value) AS value_max: bigint" in finding.reason, finding
    assert "no default is declared for it" in finding.reason and "transformation.state_defaults" in finding.reason
