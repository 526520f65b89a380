"""Table maintenance (Iceberg: expire snapshots; Delta: OPTIMIZE and VACUUM) between a crash and
its restore removes nothing the restore rule or a retained cut needs (no Spark: the sinks' two
phases are driven directly, the crash is a real SIGKILL of another process)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from barrierflow.batch.lake_cut import read_table_as_of
from barrierflow.cli.main import main
from barrierflow.retention.table_maintenance import maintain_tables
from barrierflow.sinks.cut import CutLog, cut_key
from barrierflow.storage.local import LocalObjectStore

from tests.sinks.lake_env import PIPELINE, commit, iceberg_pipeline_spec, kill_after_the_table_commit, rows, stage

MODULES = {"iceberg": "tests.sinks.test_iceberg_sink", "delta": "tests.sinks.test_delta_sink"}


def delta_pipeline_spec(tmp_path: Path) -> Path:
    """A spec of pipeline :data:`PIPELINE` whose sink ``dl`` is the Delta table that
    ``test_delta_sink.make_sink(tmp_path)`` writes (same table, same checkpoint store)."""
    spec = yaml.safe_load(iceberg_pipeline_spec(tmp_path).read_text())
    spec["sinks"] = [{"name": "dl", "type": "delta", "path": f"file://{tmp_path / 'tables' / 'totals'}"}]
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def make_sink(table_format: str, tmp_path: Path, attempt: int) -> Any:
    import importlib

    return importlib.import_module(MODULES[table_format]).make_sink(tmp_path, attempt=attempt)


@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_maintenance_between_a_crash_and_its_restore_keeps_what_restore_and_cuts_need(
        tmp_path: Path, table_format: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Checkpoints 1-3 committed; checkpoint 4's driver killed right after its table commit (in
    doubt: the table has it, the ledger does not); retention has dropped checkpoint 1 (its cut
    record with it). Maintenance then compacts the four small files into one and runs with
    nothing young enough to spare (Iceberg: every snapshot is old enough to expire; Delta: VACUUM
    retention 0 hours). The restore commits
    checkpoint 4 exactly once, and every retained cut still reads the rows up to its checkpoint."""
    sink = make_sink(table_format, tmp_path, 0)
    name = sink.name
    for checkpoint in (1, 2, 3):
        commit(sink, checkpoint, checkpoint, rows([checkpoint * 10, checkpoint * 10 + 1]))
    stage(make_sink(table_format, tmp_path, 3).write_ahead.uri, 4, rows([40, 41]))
    kill_after_the_table_commit(MODULES[table_format], tmp_path, 4)
    store = LocalObjectStore(tmp_path / "store")
    store.delete(cut_key(1))  # as retention deletes it with checkpoint 1
    spec = iceberg_pipeline_spec(tmp_path) if table_format == "iceberg" else delta_pipeline_spec(tmp_path)
    table_root = tmp_path / "tables" / "totals"
    if table_format == "delta":
        # A stray file no version references (a failed writer's) goes; a data file an epoch above the
        # committed checkpoint has moved into the table ahead of its table commit stays.
        pq.write_table(rows([99]), table_root / "stray.parquet")
        pending = f"bf-{PIPELINE}-{name}-c9-a4-b9-00000.parquet"
        pq.write_table(rows([9]), table_root / pending)

    [done] = maintain_tables(spec, older_than_hours=-1, retention_hours=0)

    assert done.committed_checkpoint == 4
    if table_format == "iceberg":
        from tests.sinks.test_iceberg_sink import ours, reader

        assert len(done.expired) == 1  # checkpoint 1's snapshot: older than every one still needed
        assert [s["barrierflow.checkpoint-id"] for s in ours(reader(tmp_path))] == ["2", "3", "4"]
        assert done.compacted == {"removed": 4, "added": 1} and done.not_done == ""
        current = reader(tmp_path).load_table("lake.totals")
        assert len(list(current.scan().plan_files())) == 1
    else:
        assert done.compacted == {"removed": 4, "added": 1}
        assert done.vacuumed == ["stray.parquet"]
        assert (table_root / pending).is_file()

    restarted = make_sink(table_format, tmp_path, 4)
    decisions = restarted.restore(4, 4)

    assert [(d.checkpoint_id, d.action) for d in decisions] == [(4, "COMMIT")]
    assert restarted.committed_checkpoint() == 4
    want = {n: Counter(k for c in range(1, n + 1) for k in (c * 10, c * 10 + 1)) for n in (2, 3, 4)}
    assert CutLog(store).checkpoints() == [2, 3, 4]
    for checkpoint, keys in want.items():
        assert main(["lake", "read", str(spec), "--checkpoint", str(checkpoint)]) == 0
        assert f"cut of checkpoint {checkpoint}:" in capsys.readouterr().out
        read = read_table_as_of(spec, f"{PIPELINE}/{name}", checkpoint)
        assert Counter(read.column("key").to_pylist()) == keys, checkpoint  # exactly once, as of the cut

    commit(restarted, 5, 5, rows([50]))  # the stream goes on after the maintenance
    latest: pa.Table = read_table_as_of(spec, f"{PIPELINE}/{name}", 5)
    assert Counter(latest.column("key").to_pylist()) == want[4] + Counter({50: 1})
