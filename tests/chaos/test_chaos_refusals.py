"""What ``barrierflow chaos`` refuses to judge, each refusal an exit 2 naming why, without
Spark: the runs of the copies are stand-ins (a small Python process that writes what a run
would, or nothing) started where chaos starts ``barrierflow run``.

* ``--kills`` below 1;
* a Kafka source that starts at ``latest`` (as a whole or one partition at ``-1``);
* an update-mode transformation whose micro-batches are not the same in every run (a stage
  reading a channel, a throttled generator): its intermediate rows differ without any loss;
* a failure-free reference run that committed no row ("nothing to compare"), with the
  reason: no input, an output not found where chaos reads it, or a transformation that kept
  nothing; no run under kills is made then.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from barrierflow.chaos import runner
from barrierflow.chaos.outputs import unread_output
from barrierflow.chaos.scratch import ChaosRefusedError, InputCount, ScratchOutput, check_judgeable, nothing_to_compare
from barrierflow.cli.main import main
from barrierflow.spec import parse_any_spec

#: Stands in for ``barrierflow run COPY``: with FAKE_RUN=subfolder it writes one Parquet file
#: into a sub-folder of the copy's Parquet sink (where the reader does not look), otherwise nothing.
FAKE_RUN = """
import os, sys, yaml, pyarrow as pa, pyarrow.parquet as pq
spec = yaml.safe_load(open(sys.argv[1]))
if os.environ.get("FAKE_RUN") == "subfolder":
    path = spec["sinks"][0]["path"].removeprefix("file://") + "/day=2026-01-01"
    os.makedirs(path, exist_ok=True)
    pq.write_table(pa.table({"key": [1, 2]}), path + "/part-00000.parquet")
"""


def kafka_spec(starting_offsets: Any) -> dict[str, Any]:
    return {"version": 1, "name": "orders", "work_dir": "/data/orders/work",
            "sources": [{"name": "in", "type": "kafka", "bootstrap_servers": "127.0.0.1:9", "topics": ["orders"],
                         "starting_offsets": starting_offsets}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "lake", "type": "parquet", "path": "file:///data/orders/lake"}],
            "checkpoint": {"storage": "file:///data/orders/chk"}}


def generator_spec(tmp_path: Path, records: int = 50) -> Path:
    data = {"version": 1, "name": "orders", "work_dir": str(tmp_path / "work"),
            "sources": [{"name": "events", "type": "generator", "partitions": 2, "records_per_partition": records}],
            "transformation": {"function": "barrierflow.transforms.projection:project"},
            "sinks": [{"name": "lake", "type": "parquet", "path": f"file://{tmp_path / 'lake'}"}],
            "checkpoint": {"storage": f"file://{tmp_path / 'chk'}"}}
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_run_command",
                        lambda spec_path, processes: [sys.executable, "-c", FAKE_RUN, str(spec_path)])


def test_kills_below_one_are_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["chaos", str(generator_spec(tmp_path)), "--kills", "0", "--scratch", str(tmp_path / "scratch")])
    assert code == 2
    assert "--kills must be at least 1 (got 0)" in capsys.readouterr().err
    assert not (tmp_path / "scratch").exists()


def test_processes_for_one_stage_is_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["chaos", str(generator_spec(tmp_path)), "--kills", "1", "--processes",
                 "--scratch", str(tmp_path / "scratch")])
    assert code == 2
    assert "--processes is for pipelines of several stages" in capsys.readouterr().err
    assert not (tmp_path / "scratch").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--upgrade-to", "{new}", "--processes"], "--processes and --upgrade-to exclude each other"),
    (["--upgrade-to", "{new}", "--mode", "mixed"], "--mode mixed and --upgrade-to exclude each other"),
    (["--kills-per-upgrade", "3"], "--kills-per-upgrade belong to the upgrade mode"),
    (["--upgrade-to", "{other}"], "an upgrade keeps the pipeline's name"),
])
def test_upgrade_mode_options_that_make_no_sense_are_refused_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    spec = generator_spec(tmp_path)
    data = yaml.safe_load(spec.read_text())
    paths = {"new": tmp_path / "new.yaml", "other": tmp_path / "other.yaml"}
    paths["new"].write_text(yaml.safe_dump(data))
    paths["other"].write_text(yaml.safe_dump({**data, "name": "invoices"}))
    code = main(["chaos", str(spec), "--kills", "1", "--scratch", str(tmp_path / "scratch"),
                 *(str(paths[a[1:-1]]) if a.startswith("{") else a for a in args)])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "scratch").exists()


@pytest.mark.parametrize(("starting_offsets", "message"), [
    ("latest", "Kafka source 'in' starts at 'latest': each copy"),
    ({"orders": {"0": 5, "1": -1}}, "starts at 'latest' for partition(s) orders:1 (offset -1)"),
])
def test_a_kafka_source_starting_at_latest_is_refused(starting_offsets: Any, message: str) -> None:
    with pytest.raises(ChaosRefusedError, match=r"set starting_offsets to 'earliest' or to fixed offsets") as caught:
        check_judgeable(parse_any_spec(kafka_spec(starting_offsets)))
    assert message in str(caught.value)


@pytest.mark.parametrize("starting_offsets", ["earliest", {"orders": {"0": 5, "1": -2}}])
def test_a_kafka_source_starting_at_earliest_or_fixed_offsets_is_judged(starting_offsets: Any) -> None:
    assert [s.name for s in check_judgeable(parse_any_spec(kafka_spec(starting_offsets)))] == ["in"]


TOTALS = {"function": "barrierflow.transforms.aggregations:keyed_running_totals", "output_mode": "update"}


def two_stages(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """gen (generator at ``rows_per_second`` 0, transformation ``first``) -> channel c ->
    final (transformation ``second``) -> Parquet."""
    return {"version": 1, "name": "orders", "work_dir": "/data/orders/work",
            "channels": [{"name": "c", "partitions": 2, "bootstrap": "embedded"}],
            "stages": [
                {"name": "gen", "sources": [{"name": "events", "type": "generator", "partitions": 2,
                                             "rows_per_second": 0, "records_per_partition": 50}],
                 "transformation": first, "sinks": [{"type": "channel", "channel": "c"}]},
                {"name": "final", "sources": [{"type": "channel", "channel": "c",
                                               "json_fields": {"key": "long", "value": "long"}}],
                 "transformation": second,
                 "sinks": [{"name": "lake", "type": "parquet", "path": "file:///data/orders/lake"}]}],
            "checkpoint": {"storage": "file:///data/orders/chk"}}


def test_an_update_mode_stage_reading_a_channel_is_refused() -> None:
    projection = {"function": "barrierflow.transforms.projection:project"}
    with pytest.raises(ChaosRefusedError) as caught:
        check_judgeable(parse_any_spec(two_stages(projection, TOTALS)))
    message = str(caught.value)
    assert message.startswith("stage 'final': its transformation writes in update mode")
    assert "reads channel 'c', whose batches depend on how far the writing stage has come" in message
    assert "differences that are no loss" in message and "or write that output in append mode" in message
    # the same totals in the stage reading the generator, its update rows copied on: judged
    assert check_judgeable(parse_any_spec(two_stages(TOTALS, projection))) == []


def test_an_update_mode_stage_reading_a_throttled_generator_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(generator_spec(tmp_path).read_text(encoding="utf-8"))
    data["transformation"] = TOTALS
    data["sources"][0]["rows_per_second"] = 100
    with pytest.raises(ChaosRefusedError, match=r"generator source 'events' at rows_per_second 100, whose batches "
                                                r"depend on the wall clock"):
        check_judgeable(parse_any_spec(data))
    data["sources"][0]["rows_per_second"] = 0
    assert check_judgeable(parse_any_spec(data)) == []
    data["sources"][0]["rows_per_second"] = 100
    data["transformation"] = {"function": "barrierflow.transforms.projection:project"}  # append: judged
    assert check_judgeable(parse_any_spec(data)) == []


def test_nothing_to_compare_names_why() -> None:
    empty = [InputCount("Kafka in", 0, "orders:0 offsets 7-7")]
    held = [InputCount("generator events", 100, "2 partitions x 50 records")]
    assert "Why: the sources held no records to read (Kafka in: 0 (orders:0 offsets 7-7))" in nothing_to_compare(
        empty, {"lake": "x"}, 0)
    found = nothing_to_compare(held, {"orders/lake": "file:///o holds 1 object(s)"}, 0)
    assert "Why: an output was not found where chaos reads it (output orders/lake: file:///o holds" in found
    kept = nothing_to_compare(held, {}, 0)
    assert "Why: the transformation kept no rows: the sources held records (generator events: 100" in kept
    assert "dead letters" not in kept
    assert "; 100 records went to the dead letters" in nothing_to_compare(held, {}, 100)
    assert all(m.startswith("nothing to compare: the failure-free reference run committed 0 rows")
               for m in (found, kept))


def test_an_output_in_a_sub_folder_is_unread(tmp_path: Path) -> None:
    output = ScratchOutput("orders", "lake", "parquet", f"file://{tmp_path / 'lake'}", "file:///data/lake")
    assert unread_output(output) is None  # nothing there: nothing unread
    (tmp_path / "lake" / "day=1").mkdir(parents=True)
    pq.write_table(pa.table({"k": [1]}), tmp_path / "lake" / "day=1" / "part-00000.parquet")
    assert "holds 1 object(s) but no committed part-*.parquet at its top" in (unread_output(output) or "")
    pq.write_table(pa.table({"k": [1]}), tmp_path / "lake" / "part-00000.parquet")
    assert unread_output(output) is None  # the reader reads something there
    assert unread_output(ScratchOutput("orders", "t", "postgres", "public.t", "public.t")) is None


@pytest.mark.usefixtures("fake_runs")
@pytest.mark.parametrize(("fake_run", "records", "why"), [
    ("nothing", 50, "Why: the transformation kept no rows: the sources held records (generator events: 100 "
                    "(2 partitions x 50 records))"),
    ("subfolder", 50, "Why: an output was not found where chaos reads it (output orders/lake: file://"),
    ("nothing", 0, "Why: the sources held no records to read (generator events: 0 (2 partitions x 0 records))"),
])
def test_a_reference_that_committed_nothing_is_nothing_to_compare(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_run: str,
        records: int, why: str) -> None:
    monkeypatch.setenv("FAKE_RUN", fake_run)
    scratch = tmp_path / "scratch"
    code = main(["chaos", str(generator_spec(tmp_path, records)), "--kills", "1", "--scratch", str(scratch)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "nothing to compare: the failure-free reference run committed 0 rows" in err and why in err
    assert sorted(p.name for p in (scratch / "chaos" / "logs").iterdir()) == []  # no run under kills was made
    assert [p.name for p in (scratch / "reference" / "logs").iterdir()] == ["run-000.log"]
    assert not (tmp_path / "chk").exists()  # no verdict stored in the pipeline's own store
