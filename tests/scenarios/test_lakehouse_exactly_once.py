"""End to end into lakehouse tables: generator -> 1 s windowed sums per key -> an Iceberg table
and (a second pipeline) a Delta table. Each driver is killed between its second table commit and
the ledger record of it, restored with ``barrierflow restore --latest`` and run to the end of
its bounded source. The tables are read with pyiceberg and the ``deltalake`` package (not with
barrierflow's code) and compared with the windows computed from the generator's records; each
table's own history must hold exactly one commit per committed non-empty checkpoint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.spec import load_spec
from barrierflow.transactions.ledger import TransactionLedger, TxnState
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

from tests.scenarios.harness import closed_second_windows, crashed_runs, finish, recover, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900), pytest.mark.slow(120)]
RECORDS = 3000
DELAY = 0.2
STEP_MS = 4


def lake_spec(tmp_path: Path, sink: dict[str, Any]) -> Path:
    """The harness's windowed pipeline into ``sink``: records 4 ms of event time apart, so a
    window closes every 250 records of a partition and nearly every epoch has rows to commit
    (also after the restore); the default ``retained``, so the run retains as it goes, also
    around the kill."""
    return windowed_spec(tmp_path, sink, records=RECORDS, per_batch=400, event_time_step_ms=STEP_MS)


def expected_rows(spec_path: Path) -> list[tuple[Any, ...]]:
    """The windows closed by the final watermark, computed from the generator's records."""
    return closed_second_windows(spec_path, RECORDS, DELAY)


def comparable(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Window bounds to the second, as text without a zone (the tables keep UTC instants)."""
    return sorted((s[:19], e[:19], *rest) for s, e, *rest in rows)


def committed_non_empty(spec_path: Path, sink: str) -> list[int]:
    """The checkpoints whose epoch of ``sink`` committed with rows, from the ledger."""
    spec = load_spec(spec_path)
    ledger = TransactionLedger(CheckpointStore.for_spec(spec).objects, spec.name)
    return sorted(t.checkpoint_id for t in ledger.list(sink)
                  if t.state is TxnState.COMMITTED and int(t.handle.get("rows", 0)) > 0)


def test_crash_between_table_commit_and_ledger_then_restore_is_exactly_once_per_format(spark, tmp_path: Path
                                                                                       ) -> None:
    ice_dir, delta_dir = tmp_path / "ice", tmp_path / "delta"
    ice_dir.mkdir()
    delta_dir.mkdir()
    ice = lake_spec(ice_dir, {"name": "windows", "type": "iceberg", "table": "lake.windows"})
    delta = lake_spec(delta_dir, {"name": "windows", "type": "delta",
                                  "path": f"file://{delta_dir / 'tables' / 'windows'}"})

    crashed = crashed_runs([(ice, "mid_sink_commit@2"), (delta, "mid_sink_commit@2")])
    for run in crashed:
        assert run.returncode == -9, run.stderr[-3000:]
        assert "injected crash at mid_sink_commit" in run.stderr

    ice_spec, delta_spec = load_spec(ice), load_spec(delta)
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{ice_dir / 'work' / 'iceberg' / 'catalog.db'}")
    # The kill came after the table commit, before the ledger record: the table is ahead of the ledger.
    in_doubt = [t for t in TransactionLedger(CheckpointStore.for_spec(ice_spec).objects, ice_spec.name).list("windows")
                if t.state is TxnState.PRECOMMITTED]
    committed_in_table = [int(s.summary.additional_properties["barrierflow.checkpoint-id"])
                          for s in catalog.load_table("lake.windows").snapshots()]
    assert in_doubt and in_doubt[-1].checkpoint_id == committed_in_table[-1]

    for spec_path in (ice, delta):
        assert recover(spec_path) == "restore"
        finish(spark, spec_path)

    expected = comparable(expected_rows(ice))
    assert expected == comparable(expected_rows(delta))  # the same generator, the same windows

    iceberg_table = catalog.load_table("lake.windows")
    assert comparable(window_rows(iceberg_table.scan().to_arrow().to_pylist())) == expected
    iceberg_commits = [s.summary.additional_properties for s in iceberg_table.snapshots()
                       if s.summary.additional_properties.get("barrierflow.sink") == "windows"]
    iceberg_ids = [int(p["barrierflow.checkpoint-id"]) for p in iceberg_commits]
    assert Counter(iceberg_ids) == Counter(committed_non_empty(ice, "windows"))  # one per checkpoint, none twice
    assert {p["barrierflow.pipeline"] for p in iceberg_commits} == {ice_spec.name}
    assert {p["barrierflow.attempt"] for p in iceberg_commits} >= {"0", "1"}  # before and after the restore

    delta_table = DeltaTable(str(delta_dir / "tables" / "windows"))
    assert comparable(window_rows(delta_table.to_pyarrow_table().to_pylist())) == expected
    delta_ids = [int(h["barrierflow.checkpoint-id"]) for h in delta_table.history()
                 if h.get("barrierflow.sink") == "windows"]
    assert Counter(delta_ids) == Counter(committed_non_empty(delta, "windows"))
    assert delta_table.transaction_version(f"{delta_spec.name}/{delta_spec.name}/windows") == max(delta_ids)
