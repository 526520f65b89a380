"""The four-table pipeline of ``examples/lakehouse/four_tables.yaml``, run once without failures:
two stages read the generator, each writes its windowed sums per key into one Iceberg and one
Delta table (1 s windows in stage ``seconds``, 2 s windows in stage ``pairs``).

Everything is read with the formats' own readers (pyiceberg, ``deltalake``) and the cut records'
JSON, and compared with windows computed here from the generator's records:

* each table's own history holds exactly one commit per checkpoint that added rows to it, and
  each commit carries rows;
* for every completed global checkpoint N, every stage has a cut record listing both its tables,
  and each table read at the version the record names equals what the table's history had
  committed up to N (its newest commit of a checkpoint <= N) and equals the windows of the
  generator's records, closed in event time, that lie wholly before the records read up to N (a
  prefix by window end: nothing missing, nothing from after the checkpoint, nothing twice); the
  Iceberg and the Delta table of a stage hold the same rows at every cut; the last cut holds
  every window the final watermark closed.

A third test runs the general case with one stage: a single-stage pipeline writing an Iceberg
table and a Parquet folder in one checkpoint.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import load_any_spec
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900), pytest.mark.slow(150)]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lakehouse" / "four_tables.yaml"
RECORDS = 1500  # per partition, 4 ms of event time apart: 6 s of event time
DELAY = timedelta(milliseconds=200)
WINDOWS = {"seconds": 1, "pairs": 2}  # stage -> window length (s), as the example says
Rows = list[tuple[str, str, int, int, int]]


def comparable(rows: list[dict[str, Any]]) -> Rows:
    """Window bounds to the second, as text without a zone (the tables keep UTC instants)."""
    return sorted((str(r["window_start"])[:19], str(r["window_end"])[:19], int(r["key"]), int(r["count"]),
                   int(r["value_sum"])) for r in rows)


def windows(model: GeneratorModel, seconds: int, ends: dict[int, int], closed: datetime) -> Rows:
    """The ``seconds``-long windows (count and sum of ``value`` per key) of the generator's
    records before offset ``ends[p]`` of each partition, those ending at or before ``closed``."""
    groups: dict[tuple[datetime, int], list[int]] = defaultdict(lambda: [0, 0])
    for p, end in ends.items():
        for _p, _o, key, value, t in model.rows(p, 0, end):
            start = datetime.fromtimestamp(t.timestamp() // seconds * seconds, UTC)
            groups[(start, key)][0] += 1
            groups[(start, key)][1] += value
    return comparable([{"window_start": s.replace(tzinfo=None), "window_end": (s + timedelta(seconds=seconds))
                        .replace(tzinfo=None), "key": k, "count": c, "value_sum": v}
                       for (s, k), (c, v) in groups.items() if s + timedelta(seconds=seconds) <= closed])


@pytest.fixture(scope="module")
def four_tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example run to the end of its generator once, in this process; its paths and spec."""
    from barrierflow.runtime.pipeline import StagedPipelineJob

    home = tmp_path_factory.mktemp("four-tables")
    text = EXAMPLE.read_text().replace("${FOUR_TABLES_HOME:-var/four-tables}", str(home)) \
        .replace("${FOUR_TABLES_RECORDS:-3000}", str(RECORDS))
    data = yaml.safe_load(text)
    # Several checkpoints in a short run, every one kept (with its cut record) to be checked.
    data["checkpoint"].update({"interval": "300ms", "timeout": "120s", "retained": 100})
    spec_path = home / "four_tables.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    spec = load_any_spec(spec_path)
    result = StagedPipelineJob(spec, spark=spark, spec_path=str(spec_path)).run(until_exhausted=True, duration=600)
    assert result.completed, "the run completed no checkpoint"
    return {"home": home, "spec": spec}


def iceberg_table(home: Path, stage: str, table: str) -> Any:
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{home / 'work' / 'stages' / stage / 'iceberg' / 'catalog.db'}")
    return catalog.load_table(table)


def histories(home: Path) -> dict[str, dict[int, Any]]:
    """Each table's commits from its own history: ``<stage>/<format>`` -> checkpoint id ->
    Iceberg snapshot id or Delta version (a checkpoint committed twice fails here)."""
    out: dict[str, dict[int, Any]] = {}
    for stage in WINDOWS:
        snapshots = [s for s in iceberg_table(home, stage, f"lake.{stage}").snapshots()
                     if s.summary.additional_properties.get("barrierflow.sink") == f"{stage}-iceberg"]
        ids = [int(s.summary.additional_properties["barrierflow.checkpoint-id"]) for s in snapshots]
        assert set(Counter(ids).values()) <= {1}, f"{stage} iceberg: a checkpoint committed twice: {ids}"
        assert all(int(s.summary.additional_properties["added-records"]) > 0 for s in snapshots)
        out[f"{stage}/iceberg"] = dict(zip(ids, (s.snapshot_id for s in snapshots), strict=True))
        commits = [h for h in DeltaTable(str(home / "tables" / stage)).history()
                   if h.get("barrierflow.sink") == f"{stage}-delta"]
        ids = [int(h["barrierflow.checkpoint-id"]) for h in commits]
        assert set(Counter(ids).values()) <= {1}, f"{stage} delta: a checkpoint committed twice: {ids}"
        assert all(int(h["operationMetrics"]["num_added_rows"]) > 0 for h in commits
                   if "num_added_rows" in h.get("operationMetrics", {}))
        out[f"{stage}/delta"] = dict(zip(ids, (int(h["version"]) for h in commits), strict=True))
    return out


def read_at(home: Path, stage: str, fmt: str, version: Any) -> Rows:
    """The table's rows at ``version`` (None: nothing committed: no rows)."""
    if version is None:
        return []
    if fmt == "iceberg":
        return comparable(iceberg_table(home, stage, f"lake.{stage}").scan(snapshot_id=version).to_arrow().to_pylist())
    return comparable(DeltaTable(str(home / "tables" / stage), version=version).to_pyarrow_table().to_pylist())


def completed_checkpoints(home: Path) -> list[int]:
    root = home / "checkpoints" / "global"
    return sorted(int(p.parent.name[4:]) for p in root.glob("chk-*/_metadata.json")
                  if json.loads(p.read_text())["status"] == "COMPLETED")


def test_every_cut_of_the_four_tables_equals_what_the_run_had_committed_up_to_it(four_tables: dict[str, Any]
                                                                                   ) -> None:
    home, spec = four_tables["home"], four_tables["spec"]
    history = histories(home)
    done = completed_checkpoints(home)
    assert len(done) >= 3 and done == list(range(1, done[-1] + 1)), done  # every one, from the first
    grew: dict[str, set[int]] = {table: set() for table in history}
    before: dict[str, Rows] = {table: [] for table in history}
    for n in done:
        for stage, seconds in WINDOWS.items():
            record = json.loads((home / "checkpoints" / "stages" / stage / "cuts" / f"chk-{n:012d}.json").read_text())
            assert set(record["tables"]) == {f"{stage}-iceberg", f"{stage}-delta"}, (n, record)
            manifest = json.loads((home / "checkpoints" / "stages" / stage / f"chk-{n}" / "_metadata.json")
                                  .read_text())
            ends = {int(p): o for p, o in manifest["barrier_offsets"]["events"].items()}
            model = GeneratorModel(spec.stage(stage).sources[0])
            newest = max(t for p, o in ends.items() if (t := model.max_event_time(p, o)) is not None)
            upper = windows(model, seconds, ends, newest - DELAY)  # every window the records up to N closed
            at_cut = {}
            for fmt in ("iceberg", "delta"):
                table = f"{stage}/{fmt}"
                entry = record["tables"][f"{stage}-{fmt}"]
                version = entry["version"] if entry else None
                committed = [c for c in history[table] if c <= n]
                # The cut's version is the table's own newest commit of a checkpoint <= N.
                assert version == (history[table][max(committed)] if committed else None), (n, table, entry)
                rows = read_at(home, stage, fmt, version)
                assert len(rows) == len(set(rows)), f"cut {n}, {table}: a row twice"
                # A prefix by window end of the windows the records up to N closed: exact rows,
                # none missing before the newest window it holds, none from after N.
                last = max((r[1] for r in rows), default="")
                assert rows == [r for r in upper if r[1] <= last], f"cut {n}, {table}"
                at_cut[fmt] = rows
                if rows != before[table]:
                    grew[table].add(n)
                before[table] = rows
            assert at_cut["iceberg"] == at_cut["delta"], f"cut {n}, stage {stage}: the two tables differ"
    # Exactly one table commit per table per committed non-empty checkpoint, from the tables' histories.
    assert {table: set(commits) for table, commits in history.items()} == grew
    assert all(grew.values()), grew
    # The last cut holds every window the final watermark closed.
    for stage, seconds in WINDOWS.items():
        model = GeneratorModel(spec.stage(stage).sources[0])
        ends = dict.fromkeys(range(2), RECORDS)
        final = windows(model, seconds, ends, max(model.max_event_time(p, RECORDS) for p in ends) - DELAY)
        assert before[f"{stage}/iceberg"] == final and before[f"{stage}/delta"] == final


def test_lake_read_returns_the_four_tables_as_of_one_cut(four_tables: dict[str, Any], capsys: Any) -> None:
    from barrierflow.batch.lake_cut import cut_tables, read_table_as_of
    from barrierflow.cli.main import main

    home = four_tables["home"]
    done = completed_checkpoints(home)
    spec_path = home / "four_tables.yaml"
    cut = cut_tables(spec_path, done[-2])
    assert sorted(cut) == ["pairs/pairs-delta", "pairs/pairs-iceberg", "seconds/seconds-delta",
                           "seconds/seconds-iceberg"]
    history = histories(home)
    for name, version in cut.items():
        stage, _, sink = name.partition("/")
        fmt = sink.rpartition("-")[2]
        committed = [c for c in history[f"{stage}/{fmt}"] if c <= done[-2]]
        assert (version.version if version else None) == (history[f"{stage}/{fmt}"][max(committed)]
                                                          if committed else None)
        assert comparable(read_table_as_of(spec_path, name, done[-2]).to_pylist()) == read_at(
            home, stage, fmt, version.version if version else None)
    assert main(["lake", "read", str(spec_path), "--checkpoint", str(done[-2]), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["checkpoint_id"] == done[-2] and set(shown["tables"]) == set(cut)


def test_a_single_stage_pipeline_writes_an_iceberg_table_and_a_parquet_folder_in_one_checkpoint(
        spark: Any, tmp_path: Path) -> None:
    """The general case with one stage: its own checkpoints, two sinks, each committed once per
    checkpoint with rows; both hold the windows computed from the generator's records."""
    import pyarrow.parquet as pq

    from tests.scenarios.harness import finish, windowed_spec

    records = 1000
    spec_path = windowed_spec(tmp_path, {"name": "ice", "type": "iceberg", "table": "lake.windows"},
                              records=records, per_batch=400, event_time_step_ms=4)
    data = yaml.safe_load(spec_path.read_text())
    data["sources"][0].pop("malformed_every")
    data["sinks"].append({"name": "files", "type": "parquet", "path": f"file://{tmp_path / 'files'}"})
    spec_path.write_text(yaml.safe_dump(data))
    spec = finish(spark, spec_path)

    model = GeneratorModel(spec.source)
    ends = dict.fromkeys(range(2), records)
    expected = windows(model, 1, ends, max(model.max_event_time(p, records) for p in ends) - DELAY)
    assert expected
    catalog = SqlCatalog("barrierflow", uri=f"sqlite:///{tmp_path / 'work' / 'iceberg' / 'catalog.db'}")
    table = catalog.load_table("lake.windows")
    assert comparable(table.scan().to_arrow().to_pylist()) == expected
    ids = [s.summary.additional_properties["barrierflow.checkpoint-id"] for s in table.snapshots()]
    assert len(ids) == len(set(ids)) >= 1
    parts = sorted((tmp_path / "files").glob("part-*.parquet"))
    assert comparable([r for p in parts for r in pq.read_table(p).to_pylist()]) == expected
