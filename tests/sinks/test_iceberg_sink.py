"""The Iceberg sink driven through the two-phase-commit template (no Spark): write-ahead batches,
a ledger on a local store, a real pyiceberg SQL catalog (SQLite; PostgreSQL in one test). The
table is read back with pyiceberg's own catalog and scans, not with the sink's code."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.errors import UserInputError
from barrierflow.sinks.cut import CutLog, tables_as_of
from barrierflow.sinks.iceberg import IcebergSink, ensure_iceberg_table, open_catalog
from barrierflow.spec.lakehouse import IcebergCatalogSpec, IcebergSinkSpec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.transactions.ledger import TxnState
from pyiceberg.catalog.sql import SqlCatalog

from tests.sinks.lake_env import (
    PIPELINE,
    commit,
    iceberg_pipeline_spec,
    kill_after_the_table_commit,
    ledger,
    rows,
    stage,
)


def make_sink(tmp_path: Path, attempt: int = 0, commit_every: int = 1, **spec: Any) -> IcebergSink:
    sink_spec = IcebergSinkSpec(type="iceberg", name="ice", table="lake.totals", **spec)
    return IcebergSink(spec=sink_spec, work_dir=tmp_path / "work", name="ice", pipeline=PIPELINE,
                       ledger=ledger(tmp_path), attempt=attempt, stage=PIPELINE, commit_every=commit_every,
                       cuts=CutLog(LocalObjectStore(tmp_path / "store")))


def reader(tmp_path: Path) -> SqlCatalog:
    """pyiceberg's catalog on the sink's default SQLite file, opened independently."""
    return SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}",
                      warehouse=f"file://{tmp_path / 'work' / 'iceberg' / 'warehouse'}")


def ours(catalog: SqlCatalog) -> list[dict[str, str]]:
    """The summaries of the table's snapshots that barrierflow made, oldest first."""
    table = catalog.load_table("lake.totals")
    return [dict(s.summary.additional_properties) for s in table.snapshots()
            if "barrierflow.checkpoint-id" in s.summary.additional_properties]


def keys(table: pa.Table) -> Counter[int]:
    return Counter(table.column("key").to_pylist())


def test_one_snapshot_per_non_empty_checkpoint_with_its_summary(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1, 2]), files=2)
    stage(sink.write_ahead.uri, 1, rows([3]))
    stage(sink.write_ahead.uri, 2, rows([4]))  # after the barrier: the next epoch's

    sink.pre_commit_epoch(1, barrier_batch=1)
    catalog = reader(tmp_path)
    assert not catalog.table_exists("lake.totals")  # pre-committed: nothing visible, not even a table
    sink.notify_checkpoint_complete(1, 1)
    sink.pre_commit_epoch(2, barrier_batch=2)
    sink.notify_checkpoint_complete(2, 2)
    sink.pre_commit_epoch(3, barrier_batch=2)  # an epoch without batches: no table commit
    sink.notify_checkpoint_complete(3, 2)

    table = catalog.load_table("lake.totals")
    assert keys(table.scan().to_arrow()) == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    summaries = ours(catalog)
    assert [s["barrierflow.checkpoint-id"] for s in summaries] == ["1", "2"]
    assert all(s["barrierflow.pipeline"] == PIPELINE and s["barrierflow.stage"] == PIPELINE
               and s["barrierflow.sink"] == "ice" and s["barrierflow.attempt"] == "0" for s in summaries)
    assert [s["added-records"] for s in summaries] == ["3", "1"]
    assert sink.write_ahead.batches() == []  # published: the write-ahead area is empty
    assert sink.ledger.get("ice", 3).state is TxnState.COMMITTED


def test_cut_records_give_each_checkpoint_s_snapshot(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1, 2]))
    commit(sink, 2, 1, rows([3]))
    sink.pre_commit_epoch(3, 1)  # empty epoch: its cut is checkpoint 2's snapshot
    sink.notify_checkpoint_complete(3, 1)

    table = reader(tmp_path).load_table("lake.totals")
    stores = {PIPELINE: LocalObjectStore(tmp_path / "store")}
    expected = {1: Counter({1: 1, 2: 1}), 2: Counter({1: 1, 2: 1, 3: 1}), 3: Counter({1: 1, 2: 1, 3: 1})}
    for checkpoint, want in expected.items():
        version = tables_as_of(stores, checkpoint)[f"{PIPELINE}/ice"]
        assert version is not None and version.version is not None
        assert keys(table.scan(snapshot_id=version.version).to_arrow()) == want, checkpoint
    assert tables_as_of(stores)[f"{PIPELINE}/ice"] == tables_as_of(stores, 3)[f"{PIPELINE}/ice"]
    with pytest.raises(UserInputError, match="checkpoint 7 has no cut record"):
        tables_as_of(stores, 7)


def test_crash_between_table_commit_and_ledger_record_resolves_exactly_once(tmp_path: Path) -> None:
    """5 of 5: a driver killed right after the table commit, before the ledger hears of it;
    the restore (another process, the next attempt) commits nothing again."""
    for checkpoint in range(1, 6):
        staging = make_sink(tmp_path, attempt=checkpoint - 1).write_ahead.uri
        stage(staging, checkpoint, rows([checkpoint * 10, checkpoint * 10 + 1]))
        kill_after_the_table_commit("tests.sinks.test_iceberg_sink", tmp_path, checkpoint)
        restarted = make_sink(tmp_path, attempt=checkpoint)
        assert restarted.ledger.get("ice", checkpoint).state is TxnState.PRECOMMITTED  # in doubt
        assert restarted.committed_checkpoint() == checkpoint  # ... but the table has it

        decisions = restarted.restore(checkpoint, checkpoint)

        assert [(d.checkpoint_id, d.action) for d in decisions] == [(checkpoint, "COMMIT")]
        assert restarted.ledger.get("ice", checkpoint).state is TxnState.COMMITTED
        catalog = reader(tmp_path)
        assert [s["barrierflow.checkpoint-id"] for s in ours(catalog)] == [str(c) for c in range(1, checkpoint + 1)]
        want = Counter(k for c in range(1, checkpoint + 1) for k in (c * 10, c * 10 + 1))
        assert keys(catalog.load_table("lake.totals").scan().to_arrow()) == want


def test_restore_commits_pre_committed_epochs_it_covers_and_aborts_newer(tmp_path: Path) -> None:
    sink = make_sink(tmp_path)
    stage(sink.write_ahead.uri, 0, rows([1]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)  # checkpoint 2 completes, its commit never ran
    stage(sink.write_ahead.uri, 2, rows([3]))
    sink.pre_commit_epoch(3, 2)  # checkpoint 3 never completes

    restarted = make_sink(tmp_path, attempt=1)
    decisions = restarted.restore(2, 1)

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(2, "COMMIT"), (3, "ABORT")]
    catalog = reader(tmp_path)
    assert keys(catalog.load_table("lake.totals").scan().to_arrow()) == Counter({1: 1, 2: 1})
    assert [s["barrierflow.checkpoint-id"] for s in ours(catalog)] == ["1", "2"]
    assert restarted.write_ahead.batches() == []  # batch 2 is replayed by the restored job
    assert CutLog(LocalObjectStore(tmp_path / "store")).get(2) is not None


def test_partitioned_table_gets_one_partition_per_file(tmp_path: Path) -> None:
    from barrierflow.sinks.write_ahead import write_ahead_batch

    sink = make_sink(tmp_path, partitioned_by=["region"])
    both = pa.concat_tables([rows([1, 2], "eu"), rows([3], "us")])
    ensure_iceberg_table(sink.spec, sink.catalog, sink.location, both.schema)
    write_ahead_batch(sink.write_ahead.uri, 0, both, split_by=["region"])
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)

    table = reader(tmp_path).load_table("lake.totals")
    assert [f.name for f in table.spec().fields] == ["region"]
    assert keys(table.scan(row_filter="region = 'us'").to_arrow()) == Counter({3: 1})
    assert keys(table.scan().to_arrow()) == Counter({1: 1, 2: 1, 3: 1})
    assert len(ours(reader(tmp_path))) == 1


def test_output_that_does_not_fit_the_table_names_the_column(tmp_path: Path) -> None:
    spec = IcebergSinkSpec(type="iceberg", name="ice", table="lake.totals")
    catalog = open_catalog(spec.catalog, tmp_path / "work")
    location = f"file://{tmp_path / 'wh' / 'totals'}"
    ensure_iceberg_table(spec, catalog, location, rows([1]).schema)
    wrong = pa.schema([("key", pa.int64()), ("region", pa.string()), ("total", pa.string())])
    with pytest.raises(UserInputError, match="output column 'total' is string but the table's column 'total' is long"):
        ensure_iceberg_table(spec, catalog, location, wrong)
    extra = rows([1]).append_column("extra", pa.array([1.0]))
    with pytest.raises(UserInputError, match="output column 'extra' is not a column of the table"):
        ensure_iceberg_table(spec, catalog, location, extra.schema)
    partitioned = spec.model_copy(update={"table": "lake.other", "partitioned_by": ["nope"]})
    with pytest.raises(UserInputError, match=r"partitioned_by column\(s\) nope are not in the output"):
        ensure_iceberg_table(partitioned, catalog, location + "2", rows([1]).schema)


@pytest.mark.postgres
def test_postgresql_catalog_shared_by_url(tmp_path: Path, postgres_endpoint: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(postgres_endpoint.dsn)
    url = (f"postgresql+psycopg2://{params.get('user', 'postgres')}:{params.get('password', '')}@"
           f"{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/{params.get('dbname', 'postgres')}")
    monkeypatch.setenv("BF_TEST_ICEBERG_CATALOG", url)
    catalog_spec = IcebergCatalogSpec(name=f"c{os.getpid()}", uri_env="BF_TEST_ICEBERG_CATALOG",
                                      warehouse=f"file://{tmp_path / 'shared-wh'}")
    sink = make_sink(tmp_path, catalog=catalog_spec)
    stage(sink.write_ahead.uri, 0, rows([1, 2]))
    sink.pre_commit_epoch(1, 0)
    sink.notify_checkpoint_complete(1, 0)

    other = SqlCatalog(catalog_spec.name, uri=url, warehouse=catalog_spec.warehouse)
    table = other.load_table("lake.totals")
    assert keys(table.scan().to_arrow()) == Counter({1: 1, 2: 1})
    assert table.location().startswith(f"file://{tmp_path / 'shared-wh'}")
    other.drop_table("lake.totals")


def test_a_pipeline_s_tables_read_as_of_a_cut_from_its_spec(tmp_path: Path) -> None:
    from barrierflow.batch.lake_cut import cut_tables, read_table_as_of

    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1, 2]))
    commit(sink, 2, 1, rows([3]))
    path = iceberg_pipeline_spec(tmp_path)

    cut = cut_tables(path, 1)
    assert list(cut) == [f"{PIPELINE}/ice"] and cut[f"{PIPELINE}/ice"].checkpoint_id == 1
    assert keys(read_table_as_of(path, f"{PIPELINE}/ice", 1)) == Counter({1: 1, 2: 1})
    assert keys(read_table_as_of(path, f"{PIPELINE}/ice")) == Counter({1: 1, 2: 1, 3: 1})  # the newest cut
    with pytest.raises(UserInputError, match="no table 'x/y'"):
        read_table_as_of(path, "x/y")


def test_commit_every_holds_epochs_and_a_restore_commits_them_in_one_snapshot(tmp_path: Path) -> None:
    sink = make_sink(tmp_path, commit_every=3)
    for checkpoint in (1, 2):
        stage(sink.write_ahead.uri, checkpoint, rows([checkpoint]))
        sink.pre_commit_epoch(checkpoint, checkpoint)
        sink.notify_checkpoint_complete(checkpoint, checkpoint)
    assert not reader(tmp_path).table_exists("lake.totals")  # 2 of 3: held

    decisions = make_sink(tmp_path, attempt=1, commit_every=3).restore(2, 2)  # a restart covering both

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(1, "COMMIT"), (2, "COMMIT")]
    summaries = ours(reader(tmp_path))
    assert [(s["barrierflow.checkpoint-id"], s["added-records"]) for s in summaries] == [("2", "2")]
    assert keys(reader(tmp_path).load_table("lake.totals").scan().to_arrow()) == Counter({1: 1, 2: 1})


def test_kept_metadata_never_hides_another_writers_commit(tmp_path: Path) -> None:
    """The sink's catalog parses a metadata file once and keeps it by location: its own commit's
    metadata is not read back, and a commit of another writer (another catalog, another driver
    of the same sink) is seen at the next load, so a checkpoint that writer committed is not
    committed again and a foreign append stays under the sink's next snapshot."""
    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1]))
    loaded, again = sink.load(), sink.load()
    assert loaded is not None and again is not None
    assert again.metadata_location == loaded.metadata_location
    assert again.metadata is loaded.metadata  # kept: not parsed again

    other = reader(tmp_path).load_table("lake.totals")  # another writer appends a snapshot
    other.append(pa.table({"key": pa.array([100], pa.int64()), "region": pa.array(["us"]),
                           "total": pa.array([0], pa.int64())}))
    assert sink.load().metadata_location == reader(tmp_path).load_table("lake.totals").metadata_location

    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)
    twin = make_sink(tmp_path)  # a second driver of the same sink that loaded the table before the commit
    assert twin.committed_checkpoint() == 1
    sink.notify_checkpoint_complete(2, 1)
    txn = twin.ledger.get("ice", 2)
    assert txn is not None
    twin.commit(txn)  # the table holds checkpoint 2 now: nothing is committed twice
    table = reader(tmp_path).load_table("lake.totals")
    assert [s["barrierflow.checkpoint-id"] for s in ours(reader(tmp_path))] == ["1", "2"]
    assert keys(table.scan().to_arrow()) == Counter({1: 1, 100: 1, 2: 1})
    parents = {s.snapshot_id: s.parent_snapshot_id for s in table.snapshots()}
    assert [s.snapshot_id for s in table.snapshots()][1] == parents[table.current_snapshot().snapshot_id]


def test_the_commits_transaction_works_the_staged_metadata_out_again_when_a_change_is_staged(tmp_path: Path) -> None:
    from barrierflow.sinks.iceberg_reads import MetadataOnceTransaction

    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1]))
    table = sink.load()
    transaction = MetadataOnceTransaction(table)
    before = transaction.table_metadata
    assert transaction.table_metadata is before  # once per set of staged changes
    transaction.set_properties(note="staged")
    assert transaction.table_metadata.properties["note"] == "staged" and "note" not in before.properties


def test_a_commit_refused_because_another_driver_committed_the_same_checkpoint_is_not_made_again(
        tmp_path: Path) -> None:
    """Two drivers of one sink commit checkpoint 1 (a stalled driver and the restore that took
    over): the second one decided from the table as it was before the first's commit. The
    catalog refuses its commit (the table moved); the sink then finds the checkpoint in the
    table and does not append the files again (pyiceberg alone would retry the append on top of
    the other driver's snapshot)."""
    sink = make_sink(tmp_path)
    commit(sink, 1, 0, rows([1]))
    stage(sink.write_ahead.uri, 1, rows([2]))
    sink.pre_commit_epoch(2, 1)
    stalled = make_sink(tmp_path)
    before = stalled.load()  # what the stalled driver decided from: checkpoint 2 not in the table
    assert stalled.committed_checkpoint(before) == 1
    sink.notify_checkpoint_complete(2, 1)
    txn = stalled.ledger.get("ice", 2)
    assert txn is not None
    assert stalled.commit_files(txn, stalled._publish(txn), before) is None
    assert [s["barrierflow.checkpoint-id"] for s in ours(reader(tmp_path))] == ["1", "2"]
    assert keys(reader(tmp_path).load_table("lake.totals").scan().to_arrow()) == Counter({1: 1, 2: 1})
