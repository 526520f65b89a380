"""The Delta sink driven through the two-phase-commit template (no Spark): write-ahead batches
inside a real Delta table's root, a ledger on a local store. The table is read back with the
``deltalake`` package directly (its log, its transaction versions), not with the sink's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.errors import UserInputError
from barrierflow.sinks.cut import CutLog, tables_as_of
from barrierflow.sinks.delta import DeltaSink, check_delta_table
from barrierflow.sinks.write_ahead import write_ahead_batch
from barrierflow.spec.lakehouse import DeltaSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import TxnState
from deltalake import DeltaTable

from tests.sinks.lake_env import PIPELINE, REPO, kill_after_the_table_commit, ledger, rows, stage


def make_sink(tmp_path: Path, attempt: int = 0, commit_every: int = 1, **spec: Any) -> DeltaSink:
    sink_spec = DeltaSinkSpec(type="delta", name="dl", path=f"file://{tmp_path / 'tables' / 'totals'}", **spec)
    return DeltaSink(spec=sink_spec, name="dl", pipeline=PIPELINE, ledger=ledger(tmp_path), attempt=attempt,
                     stage=PIPELINE, commit_every=commit_every, cuts=CutLog(LocalObjectStore(tmp_path / "store")))


def table(tmp_path: Path, version: int | None = None) -> DeltaTable:
    return DeltaTable(str(tmp_path / "tables" / "totals"), version=version)


def commits(tmp_path: Path) -> list[dict[str, Any]]:
    """The commit infos of barrierflow's commits, read from the Delta log files, oldest first."""
    out = []
    for path in sorted((tmp_path / "tables" / "totals" / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action and "barrierflow.checkpoint-id" in action["commitInfo"]:
                out.append({"version": int(path.stem), **action["commitInfo"]})
    return out


def keys(data: pa.Table) -> Counter[int]:
    return Counter(data.column("key").to_pylist())


def test_one_version_per_non_empty_checkpoint_with_its_transaction_id(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1, 2]), files=2)
    stage(sink.write_ahead.uri, 1, rows([3]))
    stage(sink.write_ahead.uri, 2, rows([4]))

    sink.pre_commit_epoch(1, 1)
    assert not (tmp_path / "tables" / "totals" / "_delta_log").exists()  # pre-committed: no table yet
    sink.notify_checkpoint_complete(1, 1)
    sink.pre_commit_epoch(2, 2)
    sink.notify_checkpoint_complete(2, 2)
    sink.pre_commit_epoch(3, 2)  # no batches: no commit
    sink.notify_checkpoint_complete(3, 2)

    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    infos = commits(tmp_path)
    assert [(c["version"], c["barrierflow.checkpoint-id"]) for c in infos] == [(0, "1"), (1, "2")]
    assert all(c["barrierflow.pipeline"] == PIPELINE and c["barrierflow.sink"] == "dl" for c in infos)
    assert table(tmp_path).transaction_version(f"{PIPELINE}/{PIPELINE}/dl") == 2
    assert sink.write_ahead.batches() == []


def test_a_replayed_commit_is_skipped_and_a_concurrent_one_refused_by_delta(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    txn = sink.ledger.get("dl", 1)
    assert txn is not None

    sink.commit(txn)  # a repeat (a restore's recover-and-commit) is a no-op
    assert [c["version"] for c in commits(tmp_path)] == [0]

    # Two committers of the same checkpoint against one table snapshot: Delta itself refuses the
    # second (its transaction identifier was committed after the snapshot it read).
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, Transaction

    stale = table(tmp_path)
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)
    sink.notify_checkpoint_complete(2, 1)
    with pytest.raises(CommitFailedError, match="Concurrent transaction"):
        stale.create_write_transaction([], mode="append", schema=stale.schema(), commit_properties=CommitProperties(
            app_transactions=[Transaction(sink.app_id, 2)]))
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 2: 1})


def test_crash_between_table_commit_and_ledger_record_resolves_exactly_once(tmp_path: Path) -> None:
    """5 of 5, as for Iceberg: killed after the Delta commit, before the ledger record."""
    for checkpoint in range(1, 6):
        staging = make_sink(tmp_path, attempt=checkpoint - 1).write_ahead.uri
        stage(staging, checkpoint, rows([checkpoint * 10, checkpoint * 10 + 1]))
        kill_after_the_table_commit("tests.sinks.test_delta_sink", tmp_path, checkpoint)
        restarted = make_sink(tmp_path, attempt=checkpoint)
        assert restarted.ledger.get("dl", checkpoint).state is TxnState.PRECOMMITTED
        assert table(tmp_path).transaction_version(restarted.app_id) == checkpoint

        decisions = restarted.restore(checkpoint, checkpoint)

        assert [(d.checkpoint_id, d.action) for d in decisions] == [(checkpoint, "COMMIT")]
        assert restarted.ledger.get("dl", checkpoint).state is TxnState.COMMITTED
        assert [c["barrierflow.checkpoint-id"] for c in commits(tmp_path)] == [str(c) for c in range(1, checkpoint + 1)]
        want = Counter(k for c in range(1, checkpoint + 1) for k in (c * 10, c * 10 + 1))
        assert keys(table(tmp_path).to_pyarrow_table()) == want


def test_restore_commits_what_it_covers_aborts_newer_and_cuts_read_as_of_versions(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)  # completed, never committed
    stage(sink.write_ahead.uri, 2, rows([3]))
    sink.pre_commit_epoch(3, 2)  # never completed

    decisions = make_sink(tmp_path, attempt=1).restore(2, 1)

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(2, "COMMIT"), (3, "ABORT")]
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 2: 1})
    stores = {PIPELINE: LocalObjectStore(tmp_path / "store")}
    for checkpoint, want in {1: Counter({1: 1}), 2: Counter({1: 1, 2: 1})}.items():
        version = tables_as_of(stores, checkpoint)[f"{PIPELINE}/dl"]
        assert version is not None and version.version is not None
        assert keys(table(tmp_path, version.version).to_pyarrow_table()) == want


def test_partitioned_table_files_under_their_partition(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, partitioned_by=["region"])
    write_ahead_batch(sink.write_ahead.uri, 0, pa.concat_tables([rows([1, 2], "eu"), rows([3], "us")]),
                      split_by=["region"])
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)

    dt = table(tmp_path)
    assert dt.metadata().partition_columns == ["region"]
    assert keys(dt.to_pyarrow_table(filters=[("region", "=", "us")])) == Counter({3: 1})
    assert keys(dt.to_pyarrow_table()) == Counter({1: 1, 2: 1, 3: 1})
    assert sorted(p.name for p in (tmp_path / "tables" / "totals").glob("region=*")) == ["region=eu", "region=us"]


def test_output_that_does_not_fit_the_table_names_the_column(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    wrong = pa.schema([("key", pa.int64()), ("region", pa.string()), ("total", pa.string())])
    with pytest.raises(UserInputError, match="output column 'total' is string but the table's column is long"):
        check_delta_table(sink.spec, wrong)
    with pytest.raises(UserInputError, match="differs from the table's partition columns"):
        check_delta_table(sink.spec.model_copy(update={"partitioned_by": ["region"]}), rows([1]).schema)
    check_delta_table(sink.spec, rows([1]).schema)  # the same schema fits


def test_commit_every_puts_several_checkpoints_in_one_version_and_a_crash_in_it_resolves_once(tmp_path: Path
                                                                                             ) -> None:
    sink = make_sink(tmp_path, commit_every=2)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    assert not (tmp_path / "tables" / "totals" / "_delta_log").exists()  # held: pre-committed, invisible
    sink.pre_commit_epoch(2, 0)  # no rows: does not count
    sink.notify_checkpoint_complete(2, 0)
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(3, 1)
    sink.notify_checkpoint_complete(3, 1)

    assert [(c["version"], c["barrierflow.checkpoint-id"]) for c in commits(tmp_path)] == [(0, "3")]
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 2: 1})
    cuts = CutLog(LocalObjectStore(tmp_path / "store"))
    assert cuts.get(1) is None and cuts.get(2) is None and cuts.get(3) is not None
    assert all(sink.ledger.get("dl", c).state is TxnState.COMMITTED for c in (1, 2, 3))

    # Checkpoints 4 and 5 committed in one version by a driver killed before the ledger heard of it.
    stage(sink.write_ahead.uri, 2, rows([4]))
    stage(sink.write_ahead.uri, 3, rows([5]))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from tests.sinks.test_delta_sink import make_sink
        sink = make_sink(Path({str(tmp_path)!r}), commit_every=2)
        sink.pre_commit_epoch(4, 2)
        sink.notify_checkpoint_complete(4, 2)
        sink.pre_commit_epoch(5, 3)
        sink.notify_checkpoint_complete(5, 3)
        raise SystemExit("not reached: the crash point should have killed this process")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "BARRIERFLOW_CRASH_AT": "mid_sink_commit"})
    assert proc.returncode == -9, proc.stderr[-2000:]
    restarted = make_sink(tmp_path, attempt=1, commit_every=2)
    assert [restarted.ledger.get("dl", c).state for c in (4, 5)] == [TxnState.PRECOMMITTED] * 2

    decisions = restarted.restore(5, 3)

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(4, "COMMIT"), (5, "COMMIT")]
    assert [c["barrierflow.checkpoint-id"] for c in commits(tmp_path)] == ["3", "5"]
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 2: 1, 4: 1, 5: 1})
    assert [restarted.ledger.get("dl", c).state for c in (4, 5)] == [TxnState.COMMITTED] * 2


def test_the_kept_table_sees_another_writers_commits_and_records_its_own_version(tmp_path: Path) -> None:
    """The sink keeps its table open across checkpoints, brought up to date at each commit: a
    version another writer appended between two checkpoints is under the sink's next commit, the
    cut names the version the sink wrote, and a second driver of the same sink that opened the
    table before a commit finds the checkpoint there and commits nothing; a version appended
    between the sink's load and its commit leaves the version the sink reports right."""
    from deltalake import write_deltalake

    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    twin = make_sink(tmp_path)
    assert twin.committed_checkpoint() == 1  # opened now: kept from here on
    write_deltalake(str(tmp_path / "tables" / "totals"), rows([100]), mode="append")  # version 1, not ours
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)
    sink.notify_checkpoint_complete(2, 1)
    txn = twin.ledger.get("dl", 2)
    assert txn is not None
    twin.commit(txn)
    assert [(c["version"], c["barrierflow.checkpoint-id"]) for c in commits(tmp_path)] == [(0, "1"), (2, "2")]
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 100: 1, 2: 1})
    cut = sink.cuts.get(2)
    assert cut is not None and cut["dl"] is not None and cut["dl"].version == 2

    # another writer commits between the sink's load and its commit: Delta puts the sink's commit
    # after it, and the sink finds its own version further down the log
    stage(sink.write_ahead.uri, 2, rows([3]))
    sink.pre_commit_epoch(3, 2)
    loaded = sink.load()
    write_deltalake(str(tmp_path / "tables" / "totals"), rows([300]), mode="append")  # version 3
    txn = sink.ledger.get("dl", 3)
    assert loaded is not None and txn is not None
    written = sink.commit_files(txn, sink._publish(txn), loaded)
    assert written is not None and written.version == 4
    sink.notify_checkpoint_complete(3, 2)  # the table holds checkpoint 3: only the ledger is told
    assert [(c["version"], c["barrierflow.checkpoint-id"]) for c in commits(tmp_path)] == [
        (0, "1"), (2, "2"), (4, "3")]
    assert keys(table(tmp_path).to_pyarrow_table()) == Counter({1: 1, 100: 1, 2: 1, 300: 1, 3: 1})
