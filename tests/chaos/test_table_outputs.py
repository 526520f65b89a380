"""``barrierflow chaos`` on lakehouse table sinks, without Spark: the scratch copies of Iceberg
and Delta sinks (scratch tables, a scratch SQLite catalog, never the spec's), and chaos's own
readers of the tables (pyiceberg, ``deltalake``), which must catch a table altered behind
chaos's back: a deleted row is missing, a row appended again is duplicated, and a second commit
of a checkpoint id is found in the table's own history."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.chaos.outputs import read_output, table_commits
from barrierflow.chaos.report import summary_lines
from barrierflow.chaos.runner import ChaosResult, OutputComparison
from barrierflow.chaos.scratch import ScratchOutput, check_judgeable, scratch_copy
from barrierflow.spec import parse_any_spec
from barrierflow.spec.lakehouse import DeltaSinkSpec, IcebergSinkSpec
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties
from pyiceberg.catalog.sql import SqlCatalog

from tests.sinks import test_delta_sink, test_iceberg_sink
from tests.sinks.lake_env import PIPELINE, commit, rows


def lake_spec(catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """gen -> channel c -> stage ``a`` into an Iceberg table and stage ``b`` into a Delta table."""
    def final(name: str, sink: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "sources": [{"type": "channel", "channel": "c", "json_fields": {"key": "long"}}],
                "transformation": {"function": "barrierflow.transforms.projection:project"}, "sinks": [sink]}
    ice: dict[str, Any] = {"name": "ice", "type": "iceberg", "table": "lake.totals"}
    if catalog is not None:
        ice["catalog"] = catalog
    return {"version": 1, "name": "lakes", "work_dir": "/data/lakes/work", "channels": [{"name": "c"}],
            "stages": [{"name": "gen", "sources": [{"name": "g", "type": "generator", "records_per_partition": 10}],
                        "transformation": {"function": "barrierflow.transforms.projection:project"},
                        "sinks": [{"type": "channel", "channel": "c"}]},
                       final("a", ice),
                       final("b", {"name": "dl", "type": "delta", "path": "file:///data/lake/totals"})],
            "checkpoint": {"storage": "file:///data/lakes/chk"}}


def test_a_copy_writes_scratch_tables_in_a_scratch_catalog_never_the_specs(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    raw = lake_spec()
    assert check_judgeable(parse_any_spec(raw)) == []  # table sinks are outputs chaos compares
    data, outputs = scratch_copy(raw, copy_name="chaos", root=tmp_path / "chaos", stamp="20261202081500")
    ice, dl = (stage["sinks"][0] for stage in data["stages"][1:])
    assert ice["table"] == "lake.totals_chaos_081500_chaos"
    # the default catalog (SQLite under the work dir) becomes a scratch SQLite file, one per stage
    assert ice["catalog"]["uri"] == f"sqlite:///{tmp_path / 'chaos' / 'iceberg' / 'a' / 'catalog.db'}"
    assert dl["path"] == f"file://{tmp_path / 'chaos' / 'out-b-0-dl'}"
    assert [(o.stage, o.sink, o.kind, o.target, o.original) for o in outputs] == [
        ("a", "ice", "iceberg", "lake.totals_chaos_081500_chaos", "lake.totals"),
        ("b", "dl", "delta", dl["path"], "file:///data/lake/totals")]
    parse_any_spec(data)  # the copy is a valid spec

    # a local SQLite catalog the spec names (directly or through uri_env) is replaced too, and a
    # warehouse the spec names moves with the other stores
    monkeypatch.setenv("LAKE_CATALOG", "sqlite:////data/lake/catalog.db")
    for catalog in ({"uri": "sqlite:////data/lake/catalog.db", "warehouse": "file:///data/lake/warehouse"},
                    {"uri_env": "LAKE_CATALOG", "warehouse": "file:///data/lake/warehouse"}):
        data, _ = scratch_copy(lake_spec(catalog), copy_name="ref", root=tmp_path / "ref", stamp="20261202081500")
        copied = data["stages"][1]["sinks"][0]["catalog"]
        assert copied["uri"].startswith(f"sqlite:///{tmp_path / 'ref'}") and "uri_env" not in copied
        assert copied["warehouse"].startswith(f"file://{tmp_path / 'ref'}")
    # a PostgreSQL (or REST) catalog is a server: kept, with a scratch table name in it
    shared = {"uri_env": "PG_CATALOG"}
    data, outputs = scratch_copy(lake_spec(shared), copy_name="ref", root=tmp_path / "ref", stamp="20261202081500")
    assert data["stages"][1]["sinks"][0]["catalog"] == shared
    assert outputs[0].target == "lake.totals_chaos_081500_ref"


def tampered(kind: str, tmp_path: Path) -> tuple[ScratchOutput, Any, Counter[str]]:
    """A table of ``kind`` with checkpoints 1 and 2 committed by barrierflow's sink, then read by
    chaos (the expected rows), then altered behind its back with the format's own client: the row
    of key 3 deleted, the row of key 5 appended again in a second commit that claims checkpoint 2.
    Returns the output, the sink's spec and the rows read before the alteration."""
    if kind == "iceberg":
        catalog = {"uri": f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}"}
        (tmp_path / "work" / "iceberg").mkdir(parents=True)
        sink: Any = test_iceberg_sink.make_sink(tmp_path, catalog=catalog)
        spec: Any = IcebergSinkSpec(type="iceberg", name="ice", table="lake.totals", catalog=catalog)
        output = ScratchOutput(PIPELINE, "ice", "iceberg", "lake.totals", "lake.totals")
    else:
        sink = test_delta_sink.make_sink(tmp_path)
        spec = DeltaSinkSpec(type="delta", name="dl", path=f"file://{tmp_path / 'tables' / 'totals'}")
        output = ScratchOutput(PIPELINE, "dl", "delta", spec.path, spec.path)
    commit(sink, 1, 1, rows([1, 2, 3]))
    commit(sink, 2, 2, rows([4, 5]))
    before = read_output(output, spec, PIPELINE)
    properties = {"barrierflow.pipeline": PIPELINE, "barrierflow.stage": PIPELINE, "barrierflow.sink": output.sink,
                  "barrierflow.checkpoint-id": "2", "barrierflow.attempt": "0"}
    if kind == "iceberg":
        table = SqlCatalog("barrierflow", uri=catalog["uri"]).load_table("lake.totals")
        table.delete("key == 3")
        table.append(rows([5]), snapshot_properties=properties)
    else:
        path = str(tmp_path / "tables" / "totals")
        DeltaTable(path).delete("key = 3")
        write_deltalake(path, rows([5]), mode="append", commit_properties=CommitProperties(custom_metadata=properties))
    return output, spec, before


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_chaos_reader_catches_a_table_altered_behind_its_back(kind: str, tmp_path: Path) -> None:
    output, spec, expected = tampered(kind, tmp_path)
    assert sum(expected.values()) == 5
    comparison = OutputComparison(output.stage, output.sink, kind, output.target, output.target)
    comparison.compare(expected, read_output(output, spec, PIPELINE))
    comparison.check_commits(table_commits(output, spec, PIPELINE))
    assert (comparison.missing, comparison.extra, comparison.duplicated) == (1, 0, 1)
    assert '"key": 3' in comparison.examples["missing"][0] and '"key": 5' in comparison.examples["duplicated"][0]
    assert comparison.commits == 3 and comparison.commits_repeated == {2: 2}

    result = ChaosResult("lakep", "pipeline.yaml", 1, "group", 1, str(tmp_path), started=datetime.now(UTC),
                         outputs=[comparison], dead_letters_expected=0, dead_letters=0)
    assert not result.passed and result.commits_repeated == 1
    assert result.by_format()[kind] == {"outputs": 1, "rows_expected": 5, "rows": 5, "missing": 1, "extra": 0,
                                        "duplicated": 1, "commits": 3, "commits_repeated": 1}
    text = "\n".join(summary_lines(result))
    assert f"{kind}: 1 output(s), 5 rows of 5; missing 1, extra 0, duplicated 1; table commits 3, " \
           "checkpoints committed more than once 1" in text
    assert "checkpoint 2: 2 commits" in text

    # the same table untouched compares equal and passes
    clean = OutputComparison(output.stage, output.sink, kind, output.target, output.target)
    clean.compare(expected, expected)
    clean.check_commits(Counter({1: 1, 2: 1}))
    assert ChaosResult("lakep", "pipeline.yaml", 1, "group", 1, str(tmp_path), started=datetime.now(UTC),
                       outputs=[clean], dead_letters_expected=0, dead_letters=0).passed
