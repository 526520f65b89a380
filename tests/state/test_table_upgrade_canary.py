"""``barrierflow upgrade``'s canary on a pipeline writing an Iceberg table: the canary's epochs
are held (pre-committed, never committed while it runs), so the table's snapshot history is
the old spec's until the canary passed; then each held epoch is committed once, and the run of
the upgraded spec commits each later checkpoint once.

A keyed running-totals pipeline (generator, 5 keys -> count and sum per key, update mode) writes
the Iceberg table ``lake.totals`` (pyiceberg's SQL catalog in its work dir); the table is read
with pyiceberg's own catalog and scans, and its rows compared with a recount of the generator's
records (:mod:`tests.support.running_totals`).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.ops.savepoint import savepoint
from barrierflow.spec import load_spec
from barrierflow.upgrade.record import UpgradeStep, read_record
from pyiceberg.catalog.sql import SqlCatalog

from tests.support.in_session_runs import run_spec as run
from tests.support.running_totals import assert_exactly_once, recount, totals_spec

pytestmark = [pytest.mark.spark, pytest.mark.slow(90)]

NAME, PARTITIONS, RECORDS, KEYS = "icecanary", 2, 400, 5


def iceberg_spec(tmp: Path, file: str) -> Path:
    path = totals_spec(tmp, file, name=NAME, partitions=PARTITIONS, records=RECORDS, keys=KEYS, shuffle=2)
    data = yaml.safe_load(path.read_text())
    data["sinks"] = [{"name": "results", "type": "iceberg", "table": "lake.totals"}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def commits(tmp: Path) -> list[tuple[int, int, int]]:
    """The table's snapshots, oldest first: (snapshot id, checkpoint id, commit time in ms)."""
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp / 'work' / 'iceberg' / 'catalog.db'}")
    return [(s.snapshot_id, int(s.summary.additional_properties["barrierflow.checkpoint-id"]), s.timestamp_ms)
            for s in catalog.load_table("lake.totals").snapshots()]


def test_the_canary_commits_nothing_to_the_table_and_each_epoch_is_committed_once(
        spark: Any, tmp_path: Path, cli: Any) -> None:
    old, new = iceberg_spec(tmp_path, "old.yaml"), iceberg_spec(tmp_path, "new.yaml")
    store = CheckpointStore.for_spec(load_spec(old))
    run(spark, old, checkpoints=2)
    source = savepoint(old).checkpoint_id
    before = commits(tmp_path)
    assert before and all(cid <= source for _sid, cid, _t in before)

    code, _, err = cli("upgrade", str(old), "--to", str(new), "--canary-checkpoints", "2")
    assert code == 0, err
    record = read_record(store.objects)
    assert record is not None and record.step is UpgradeStep.CANARY_PASSED and len(record.verified) == 2, record
    after = commits(tmp_path)
    assert after[:len(before)] == before  # the old spec's history, unchanged
    canary = after[len(before):]
    assert canary and {cid for _sid, cid, _t in canary} <= set(range(source + 1, max(record.verified) + 1)), canary
    # Nothing was committed while the canary ran: every commit of its epochs came after its last cut.
    last = store.get(max(record.verified)).completion_time.astimezone(UTC)
    assert all(datetime.fromtimestamp(t / 1000, UTC) >= last.replace(microsecond=last.microsecond // 1000 * 1000)
               for _sid, _cid, t in canary), (canary, last)

    run(spark, new, until_exhausted=True, duration=150)
    final = commits(tmp_path)
    assert final[:len(after)] == after
    later = [cid for _sid, cid, _t in final[len(after):]]
    assert later and min(later) > max(record.verified), later
    ids = [cid for _sid, cid, _t in final]
    assert [cid for cid, n in Counter(ids).items() if n > 1] == []  # one table commit per checkpoint
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}")
    rows = catalog.load_table("lake.totals").scan().to_arrow().to_pylist()
    assert_exactly_once(rows, recount(PARTITIONS, RECORDS, KEYS))

    # The general case with one stage: checkpoints show and verify name the cut's snapshot.
    newest = store.latest()
    assert newest is not None
    n = newest.checkpoint_id
    snapshot = max(((cid, sid) for sid, cid, _t in final if cid <= n))[1]
    code, out, err = cli("checkpoints", "show", str(new), str(n), "--json")
    assert code == 0, err
    [table] = json.loads(out)["tables"]
    assert (table["name"], table["format"], table["table"], table["version"]) == (
        f"{NAME}/results", "iceberg", "lake.totals", snapshot)
    code, out, err = cli("verify", str(new), "--checkpoint", str(n))
    assert code == 0, out + err
    assert f"table {NAME}/results: passed: iceberg lake.totals at snapshot {snapshot}" in out
