"""The machinery of ``python -m bench --scenario upgrade`` (bench/upgrade.py) at a tiny scale, without
Spark: its independent checks (the input's recount, the sink's final totals, the comparison, the
diff's expected counts) and its specs. The scenario's figures are benchmarked, not tested."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from barrierflow.sources.generator import GeneratorModel
from barrierflow.spec import load_spec, project_home
from barrierflow.spec.models import GeneratorSourceSpec

from bench.upgrade import (
    compare_totals,
    expected_diff,
    final_totals,
    input_totals,
    recount_frame,
    scenario_spec,
    write_spec,
)


def test_the_input_recount_is_what_the_generator_reads() -> None:
    """numpy's recount of uneven offset ranges equals the totals of the rows the generator's own
    record function yields for them."""
    keys = 37
    model = GeneratorModel(GeneratorSourceSpec(type="generator", partitions=4, keys=keys))
    start, end = {"0": 3, "1": 0, "2": 10, "3": 5}, {"0": 50, "1": 41, "2": 10, "3": 77}
    counts, sums = input_totals(end, keys, start=start)
    want_counts, want_sums = np.zeros(keys, dtype=np.int64), np.zeros(keys, dtype=np.int64)
    for p in range(4):
        for _, _, key, value, _ in model.rows(p, start[str(p)], end[str(p)]):
            want_counts[key] += 1
            want_sums[key] += value
    assert counts.tolist() == want_counts.tolist() and sums.tolist() == want_sums.tolist()
    assert counts.sum() == sum(end[p] - start[p] for p in end)


def test_final_totals_are_each_keys_last_update_and_the_comparison_names_every_difference(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "_staging").mkdir(parents=True)
    schema = pa.schema([("key", pa.int64()), ("count", pa.int64()), ("value_sum", pa.int64())])
    pq.write_table(pa.table({"key": [1, 2, 3], "count": [1, 1, 1], "value_sum": [5, 6, 7]}, schema=schema),
                   out / "part-000000000001-a0-00000.parquet")
    pq.write_table(pa.table({"key": [2, 1], "count": [3, 2], "value_sum": [20, 9]}, schema=schema),
                   out / "part-000000000002-a1-00000.parquet")
    # write-ahead data that was never committed: not output
    pq.write_table(pa.table({"key": [3], "count": [99], "value_sum": [99]}, schema=schema),
                   out / "_staging" / "x.parquet")
    totals = final_totals(out)
    assert totals.to_dict("index") == {1: {"count": 2, "value_sum": 9}, 2: {"count": 3, "value_sum": 20},
                                       3: {"count": 1, "value_sum": 7}}
    assert compare_totals(totals, totals.copy()).equal
    other = totals.drop(index=3).copy()
    other.loc[4] = [1, 1]
    other.loc[2, "value_sum"] = 21
    outcome = compare_totals(other, totals)
    assert (outcome.missing, outcome.extra, outcome.differing) == (1, 1, 1)
    assert str(outcome).startswith("1 missing / 1 extra / 1 differing keys")
    assert "key 2: (3, 21) != (3, 20)" in str(outcome)


def test_the_recounted_frame_and_diff_follow_the_input() -> None:
    """8 keys, 4 partitions: offsets 1 each cover g = 0..3 (keys 0-3); offsets 3 each cover g =
    0..11, so keys 4-7 are added and keys 0-3 changed (g = 8..11)."""
    frame = recount_frame(dict.fromkeys("0123", 3), 8)
    assert frame["count"].tolist() == [2, 2, 2, 2, 1, 1, 1, 1]
    assert expected_diff(dict.fromkeys("0123", 1), dict.fromkeys("0123", 3), 8) == {
        "added": 4, "changed": 4, "removed": 0}
    assert expected_diff(dict.fromkeys("0123", 2), dict.fromkeys("0123", 2), 8) == {
        "added": 0, "changed": 0, "removed": 0}


@pytest.mark.parametrize("partitions", [4, 16])
def test_the_scenarios_specs_keep_their_state_in_rocksdb_and_write_parquet(tmp_path: Path, partitions: int) -> None:
    base = load_spec(project_home() / "include" / "pipelines" / "bench.yaml")
    spec = scenario_spec(base, tmp_path / "p", keys=100, per_partition_batch=7, partitions=partitions,
                         records_per_partition=40)
    loaded = load_spec(str(write_spec(spec, tmp_path / "s.yaml")))
    assert loaded.spark.state_store == "rocksdb" and loaded.spark.shuffle_partitions == partitions
    assert isinstance(loaded.source, GeneratorSourceSpec)
    assert (loaded.source.keys, loaded.source.max_records_per_batch, loaded.source.records_per_partition) == (100, 7,
                                                                                                              40)
    assert [s.type for s in loaded.sinks] == ["parquet"]
    suite = json.loads(Path(loaded.verification.expectations).read_text())
    bounds = {e["kwargs"]["column"]: e["kwargs"].get("max_value") for e in suite["expectations"]
              if e["type"] == "expect_column_values_to_be_between"}
    assert bounds["key_key"] == 99 and bounds["partition_id"] == partitions - 1


def test_the_scenario_refuses_bad_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import UPGRADE_KEYS, build_parser, main

    assert main(["--scenario", "upgrade", "--keys", "0"]) == 2
    assert "--keys >= 1" in capsys.readouterr().err
    assert build_parser().parse_args(["--scenario", "upgrade"]).keys is None
    assert UPGRADE_KEYS == 3_400_000
