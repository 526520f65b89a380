"""Atomic mode of the Iceberg sink (``catalog.atomic: true``) on a real PostgreSQL catalog: two
stages' tables move in one transaction, so a reader that knows nothing of barrierflow
(:mod:`bench.atomic_cut_reader`: psycopg and pyiceberg only) never reads a torn cut; without it
such a reader does. No Spark: the epochs' rows are written ahead as executors write them and the
sinks are driven through their real entry points (:mod:`bench.atomic_cut`). The real-pipeline
run (:mod:`bench.atomic_cut_pipeline`, Spark under ``barrierflow chaos``) is too long for the
suite: its plumbing is checked here without running a pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from barrierflow.chaos.runner import ChaosOptions, ChaosResult, ChaosRunner
from barrierflow.chaos.scratch import scratch_copy
from barrierflow.faults import at_point
from barrierflow.sinks.cut import CutLog, tables_as_of
from barrierflow.sinks.iceberg import IcebergSink
from barrierflow.sinks.iceberg_atomic import CUTS, gid_of, libpq_params
from barrierflow.spec.lakehouse import IcebergCatalogSpec, IcebergSinkSpec
from barrierflow.spec.loader import load_spec_data, parse_any_spec
from barrierflow.storage.local import LocalObjectStore
from barrierflow.testing import write_ahead_batch
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from pyiceberg.catalog.sql import SqlCatalog

from bench import atomic_cut
from bench.atomic_cut_pipeline import PollStats, atomic_tables, verdict
from bench.atomic_cut_reader import CatalogReader, torn
from tests.sinks.lake_env import REPO

_used = Counter[str]()


@pytest.fixture
def url(postgres_endpoint: Any) -> str:
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(postgres_endpoint.dsn)
    return (f"postgresql+psycopg2://{p.get('user', 'postgres')}:{p.get('password', '')}@{p.get('host', '127.0.0.1')}:"
            f"{p.get('port', 5432)}/{p.get('dbname', 'postgres')}")


def catalog_name(prefix: str) -> str:
    """A catalog name of its own per test (the tests share one database)."""
    _used[prefix] += 1
    return f"{prefix}{os.getpid()}x{_used[prefix]}"


def write(sink: Any, checkpoint: int, keys: list[int]) -> None:
    write_ahead_batch(sink.write_ahead.uri, checkpoint, pa.table({"key": pa.array(keys, pa.int64())}))
    sink.pre_commit_epoch(checkpoint, checkpoint)


def scan(url: str, catalog: str, work: Path, table: str) -> Counter[int]:
    cat = SqlCatalog(catalog, uri=url, warehouse=f"file://{work / 'warehouse'}")
    return Counter(cat.load_table(table).scan().to_arrow().column("key").to_pylist())


def drive(url: str, work: Path, catalog: str, checkpoints: int, crash_at: str | None = None) -> int:
    env = {**os.environ, **({"BARRIERFLOW_CRASH_AT": crash_at} if crash_at else {})}
    proc = subprocess.run([sys.executable, "-m", "bench.atomic_cut", "drive", "--url", url, "--work", str(work),
                           "--catalog", catalog, "--checkpoints", str(checkpoints)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, -9), proc.stderr[-3000:]
    return proc.returncode


def test_atomic_mode_is_refused_where_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match=r"catalog\.atomic: true needs a type 'sql' catalog on PostgreSQL"):
        IcebergCatalogSpec(atomic=True)  # SQLite under the work dir
    with pytest.raises(ValueError, match="remove commit_every: 3 or the atomic mode"):
        IcebergSinkSpec(type="iceberg", table="lake.a", commit_every=3,
                        catalog=IcebergCatalogSpec(atomic=True, uri_env="CATALOG_URI"))

    def pipeline(*sinks: dict[str, Any]) -> dict[str, Any]:
        """Stage s0 feeds the final stages s1 and s2 (one table sink each) through channel ab."""
        project = {"function": "barrierflow.transforms.projection:project"}
        source = {"type": "channel", "channel": "ab", "json_fields": {"key": "long"}}
        final = [{"name": f"s{i + 1}", "sources": [source], "transformation": project, "sinks": [sink]}
                 for i, sink in enumerate(sinks)]
        return {"name": "p", "checkpoint": {"storage": "file:///tmp/x"}, "channels": [{"name": "ab"}],
                "stages": [{"name": "s0", "sources": [{"name": "events", "type": "generator"}],
                            "transformation": project, "sinks": [{"type": "channel", "channel": "ab"}]}, *final]}

    atomic = {"type": "iceberg", "name": "a", "table": "lake.a", "catalog": {"atomic": True, "uri_env": "CAT"}}
    both = parse_any_spec(pipeline(atomic, {**atomic, "name": "b", "table": "lake.b"}))
    assert [s.sinks[0].catalog.atomic for s in both.stages[1:]] == [True, True]
    for other, message in [
        ({"type": "iceberg", "name": "b", "table": "lake.b", "catalog": {"uri_env": "CAT"}},
         "stage 's2' sink 'b' not atomic: set catalog.atomic: true on every Iceberg sink"),
        ({"type": "iceberg", "name": "b", "table": "lake.b", "catalog": {"atomic": True, "uri_env": "OTHER"}},
         "name different catalogs"),
        ({"type": "delta", "name": "b", "path": "file:///tmp/d"}, "Delta tables cannot join the atomic Iceberg commit"),
    ]:
        with pytest.raises(Exception, match=message):
            parse_any_spec(pipeline(atomic, other))


@pytest.mark.postgres
def test_tables_move_together_and_a_cut_left_prepared_commits_exactly_once(url: str, tmp_path: Path) -> None:
    catalog = catalog_name("atomic")
    reader = CatalogReader(libpq_params(url), catalog, "lake")
    a, b = atomic_cut.make_sinks(tmp_path, url, catalog, attempt=0)
    expected = {"a": Counter[int](), "b": Counter[int]()}
    reads = []
    at_mid_commit: list[tuple[str, dict[str, int | None]]] = []
    for checkpoint, keys_a, keys_b in [(1, [1, 2], [10]), (2, [3], [])]:  # b has no rows in epoch 2
        write(a, checkpoint, keys_a)
        write(b, checkpoint, keys_b)
        with at_point("mid_sink_commit", lambda context: at_mid_commit.append((context["sink"], reader.read()))):
            a.notify_checkpoint_complete(checkpoint, checkpoint)
            reads.append(reader.read())  # a staged its part, b not yet: nothing moved
            b.notify_checkpoint_complete(checkpoint, checkpoint)
            reads.append(reader.read())
        expected["a"].update(keys_a)
        expected["b"].update(keys_b)
    # a created its table (empty, no snapshot) and staged its part; b not yet: nothing moved. b has an
    # empty snapshot of checkpoint 2 (its epoch without rows), so every table names the cut it is in
    assert reads == [{"a": None}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 2}]
    # every commit reaches mid_sink_commit (chaos arms it) after its part is recorded, before the ledger is told
    assert at_mid_commit == [(s, r) for s, r in zip("abab", reads, strict=True)]
    stores = {s: LocalObjectStore(tmp_path / f"store-{s}") for s in ("s1", "s2")}
    cat = SqlCatalog(catalog, uri=url)
    current = {f"{s}/{n}": cat.load_table(f"lake.{n}").current_snapshot().snapshot_id for s, n in (("s1", "a"),
                                                                                                   ("s2", "b"))}
    assert {k: (v.version, v.checkpoint_id) for k, v in tables_as_of(stores, 2).items() if v} == {
        k: (sid, 2) for k, sid in current.items()}  # a's record, written before the move, names the moved snapshot

    # checkpoint 3 in a driver (attempt 1) killed between PREPARE TRANSACTION and COMMIT PREPARED
    (tmp_path / "attempt").write_text("0")
    (tmp_path / "completed").mkdir()
    for checkpoint in (1, 2):
        (tmp_path / "completed" / str(checkpoint)).write_text("")
    assert drive(url, tmp_path, catalog, 1, crash_at="iceberg_atomic_prepared") == -9
    expected["a"].update(atomic_cut.rows_of("a", 3))
    expected["b"].update(atomic_cut.rows_of("b", 3))
    with atomic_cut.psycopg_connect(url) as conn:
        prepared = [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]
        assert gid_of("atomicp", 3) in prepared
        assert reader.read() == {"a": 2, "b": 2}  # in doubt: the old cut, whole

        for attempt in (2, 3):  # a restore, then another one: the cut moves once
            for sink in atomic_cut.make_sinks(tmp_path, url, catalog, attempt=attempt):
                sink.restore(3, 3)
                assert reader.read() == {"a": 3, "b": 3}
            assert [r[0] for r in conn.execute(f"SELECT checkpoint_id FROM {CUTS} WHERE catalog_name = %s "
                                               "ORDER BY checkpoint_id", [catalog]).fetchall()] == [1, 2, 3]
            assert gid_of("atomicp", 3) not in [r[0] for r in conn.execute("SELECT gid FROM pg_prepared_xacts")]
    for name in ("a", "b"):
        assert scan(url, catalog, tmp_path, f"lake.{name}") == expected[name]  # once each, none lost
        ledger = TransactionLedger(LocalObjectStore(tmp_path / f"store-{'s1' if name == 'a' else 's2'}"), "atomicp")
        assert [(t.checkpoint_id, t.state) for t in ledger.list(name)] == [(c, TxnState.COMMITTED) for c in (1, 2, 3)]
    cut = tables_as_of({s: LocalObjectStore(tmp_path / f"store-{s}") for s in ("s1", "s2")})
    assert {k: v.checkpoint_id for k, v in cut.items() if v} == {"s1/a": 3, "s2/b": 3}
    reader.close()


@pytest.mark.postgres
def test_without_atomic_mode_a_reader_sees_a_torn_cut(url: str, tmp_path: Path) -> None:
    """The reader can tell: committed table by table, table a is at checkpoint 2 while b is at 1."""
    catalog = catalog_name("plain")
    spec = IcebergCatalogSpec(name=catalog, uri=url, warehouse=f"file://{tmp_path / 'warehouse'}")
    sinks = []
    for stage, name in (("s1", "a"), ("s2", "b")):
        store = LocalObjectStore(tmp_path / f"store-{stage}")
        sinks.append(IcebergSink(spec=IcebergSinkSpec(type="iceberg", name=name, table=f"lake.{name}", catalog=spec),
                                 work_dir=tmp_path / "work", name=name, pipeline="plainp", stage=stage,
                                 ledger=TransactionLedger(store, "plainp"), pipeline_name="plainp",
                                 cuts=CutLog(store)))
    reader = CatalogReader(libpq_params(url), catalog, "lake")
    reads: list[dict[str, int | None]] = []
    for checkpoint in (1, 2):
        for sink in sinks:
            write(sink, checkpoint, [checkpoint])
        with at_point("mid_sink_commit", lambda _context: reads.append(reader.read())):
            for sink in sinks:
                sink.notify_checkpoint_complete(checkpoint, checkpoint)
    assert reads == [{"a": 1}, {"a": 1, "b": 1}, {"a": 2, "b": 1}, {"a": 2, "b": 2}]
    assert [torn(r) for r in reads] == [False, False, True, False]
    reader.close()
    only_b = CatalogReader(libpq_params(url), catalog, "lake", tables=frozenset({"b", "absent"}))
    assert only_b.read() == {"b": 2}  # a reader limited to some tables reads those it names and finds
    only_b.close()


@pytest.mark.postgres
@pytest.mark.slow(120)
def test_chaos_kills_leave_no_torn_read_and_every_row_once(url: str, tmp_path: Path) -> None:
    """The recorded run's harness, small: kills at a random moment and between PREPARE and
    COMMIT PREPARED while an independent reader polls the catalog."""
    result = atomic_cut.run(url, tmp_path, kills=2, min_polls=300, seed=7, catalog=catalog_name("chaos"),
                            max_delay=2.0, prepare_every=2)
    assert result["kills"] == {"random moment": 1, "between PREPARE and COMMIT PREPARED": 1}
    assert result["polls"] >= 300 and result["torn_reads"] == 0, result
    assert result["distinct_checkpoints_seen_by_reader"] >= 2, result
    for name in ("a", "b"):
        assert result[name]["expected_rows"] > 0 and result[name]["rows"] == result[name]["expected_rows"], result
        assert (result[name]["missing"], result[name]["extra"], result[name]["duplicated"]) == (0, 0, 0), result
    assert result["prepared_left"] == 0 and result["passed"]


def test_the_pipeline_run_polls_the_tables_of_the_copy_under_kills_and_arms_the_prepared_point(
        tmp_path: Path) -> None:
    """bench/atomic_lake.yaml under chaos: the reader reads the chaos copy's four tables (scratch
    names in the spec's PostgreSQL catalog, beside the reference copy's), chaos arms the point
    between PREPARE and COMMIT PREPARED, and the verdict fails on a torn read or too few reads."""
    spec_path = REPO / "bench" / "atomic_lake.yaml"
    data, outputs = scratch_copy(load_spec_data(spec_path), copy_name="chaos", root=tmp_path / "chaos",
                                 stamp="20261202123456")
    tables = atomic_tables(parse_any_spec(data))
    assert (tables.catalog.name, tables.catalog.uri_env, tables.namespace) == ("atomiclake", "ATOMIC_CATALOG_URI",
                                                                               "lake")
    assert tables.names == {o.target.removeprefix("lake.") for o in outputs} == {
        f"{t}_chaos_123456_chaos" for t in ("seconds_a", "seconds_b", "pairs_a", "pairs_b")}
    runner = ChaosRunner(spec_path, ChaosOptions(kills=1, scratch=tmp_path / "scratch"))
    assert "iceberg_atomic_prepared" in runner.points and "after_global_manifest" in runner.points

    result = ChaosResult("p", str(spec_path), 0, "mixed", 1, str(tmp_path), runner.started)
    assert verdict(result, PollStats(polls=10), min_polls=10, left=0)["problems"] == ["chaos failed"]  # no output
    figures = verdict(result, PollStats(polls=9, torn=1), min_polls=10, left=1)
    assert not figures["passed"] and [p.split(" ")[0] for p in figures["problems"]] == ["chaos", "1", "the", "1"]
