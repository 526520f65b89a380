"""``barrierflow lake read``: every table's version as of a cut, from the cut records a real
Iceberg sink wrote (no Spark); a checkpoint without a cut is exit code 2 naming the ones with one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from barrierflow.cli.main import main

from tests.sinks.lake_env import PIPELINE, commit, iceberg_pipeline_spec, rows
from tests.sinks.test_iceberg_sink import make_sink


def test_lake_read_prints_each_table_s_version_as_of_the_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    sink = make_sink(tmp_path)
    for checkpoint in (1, 2):
        commit(sink, checkpoint, checkpoint, rows([checkpoint]))
    path = iceberg_pipeline_spec(tmp_path)
    snapshots = [s.snapshot_id for s in sink.catalog.load_table("lake.totals").snapshots()]

    assert main(["lake", "read", str(path), "--checkpoint", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["checkpoint_id"] == 1 and first["tables"][f"{PIPELINE}/ice"]["version"] == snapshots[0]
    assert main(["lake", "read", str(path)]) == 0  # the newest cut
    assert capsys.readouterr().out.splitlines() == [
        "cut of checkpoint 2:",
        f"  {PIPELINE}/ice: iceberg lake.totals snapshot {snapshots[1]} (committed with checkpoint 2)"]
    assert main(["lake", "read", str(path), "--checkpoint", "9"]) == 2
    assert "checkpoint 9 has no cut record" in capsys.readouterr().err
