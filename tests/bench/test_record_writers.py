"""The record writers of ``python -m bench --compare flink-sql``, ``--scenario upgrade``,
bench.channel_transport, bench.atomic_cut and bench.chaos_upgrade_runs (bench/record.py): called
with made-up figures they print the header and write the .md and .json with every round's and
every run's figures into their folder; their entry points, with the measuring parts replaced,
start a record and write it (no Spark, Kafka, Flink, PostgreSQL or chaos run here)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.spec import load_spec
from barrierflow.spec.models import StageSpec

from bench.record import RESULTS, RunRecord

ROOT = Path(__file__).resolve().parents[2]
STEM = "2026-12-04-0905"


def _record(scenario: str, command: str) -> RunRecord:
    return RunRecord(scenario=scenario, command=command, commit="0123456789ab",
                     started=datetime(2026, 12, 4, 9, 5, tzinfo=UTC), cores=2, load_start=0.5, load_end=0.75)


def _read(written: tuple[Path, Path] | None, md: Path, record: RunRecord, what: str,
          rounds: int = 1) -> tuple[list[str], dict[str, Any]]:
    """The record's lines and JSON, checked to be at ``md`` and ``md`` with .json, to open with the
    command and the header line, and to carry the record's provenance."""
    assert written == (md, md.with_suffix(".json"))
    lines = md.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == [f"`{record.command}`", "", record.header(what, rounds)]
    document = json.loads(md.with_suffix(".json").read_text(encoding="utf-8"))
    assert {k: document[k] for k in ("scenario", "what", "command", "commit", "started", "cores", "load_average",
                                     "rounds")} == {
        "scenario": record.scenario, "what": what, "command": record.command, "commit": "0123456789ab",
        "started": "2026-12-04T09:05:00+00:00", "cores": 2, "load_average": [0.5, 0.75], "rounds": rounds}
    return lines, document


@pytest.fixture(scope="module")
def spec() -> StageSpec:
    return load_spec(str(ROOT / "include" / "pipelines" / "bench.yaml"))


@pytest.mark.parametrize(("name", "folder"), [("bench.flink_compare", "flink-sql"), ("bench.upgrade", "upgrade"),
                                              ("bench.channel_transport", "channel-transport"),
                                              ("bench.atomic_cut", "atomic-cut"),
                                              ("bench.chaos_upgrade_runs", "chaos-upgrade-runs")])
def test_each_entry_point_records_into_its_own_folder(name: str, folder: str) -> None:
    import importlib

    assert importlib.import_module(name).RESULTS == RESULTS / folder


# -- python -m bench --compare flink-sql ------------------------------------------------------------


def _runs() -> Any:
    from bench.flink_compare import Runs

    return Runs(barrierflow_none=[2.0e6, 2.2e6], barrierflow_1s=[1.9e6, 2.0e6], flink_none=[2.0e6, 2.5e6],
                flink_1s=[1.6e6, 2.0e6], flink_tuned_none=[2.5e6, 2.75e6], flink_tuned_1s=[1.9e6, 2.5e6],
                flink_version="2.3.0", flink_config={"untuned": {}, "tuned": {"table.exec.mini-batch.enabled": "true"}})


def test_flink_comparison_keeps_every_rounds_rate_of_each_system(tmp_path: Path, spec: StageSpec,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from bench.flink_compare import record_run

    record = _record("flink-sql", "python -m bench --compare flink-sql --seconds 30 --rounds 2")
    written = record_run(record, _runs(), spec.name, "local[2]", seconds=30, rounds=2, markdown=None,
                         results=tmp_path)
    what = f"barrierflow and Flink SQL side by side, pipeline {spec.name}"
    lines, document = _read(written, tmp_path / f"{STEM}.md", record, what, rounds=2)
    figures = document["figures"]
    assert (figures["pipeline"], figures["master"], figures["seconds"]) == (spec.name, "local[2]", 30)
    assert figures["barrierflow_none"] == [2.0e6, 2.2e6] and figures["barrierflow_1s"] == [1.9e6, 2.0e6]
    assert figures["flink_tuned_none"] == [2.5e6, 2.75e6] and figures["flink_tuned_1s"] == [1.9e6, 2.5e6]
    assert figures["flink_none"] == [2.0e6, 2.5e6] and figures["flink_1s"] == [1.6e6, 2.0e6]
    assert figures["flink_version"] == "2.3.0" and figures["flink_config"]["tuned"] == {
        "table.exec.mini-batch.enabled": "true"}
    assert figures["load"] == [0.5, 0.75]  # the table's load line is the record's
    assert "| barrierflow (ABS) | 2,100,000 (2,000,000-2,200,000) | 1,950,000 (1,900,000-2,000,000) | 0.95 / 0.91 |" \
        in lines
    assert any("load average (1 min) 0.5 at the start, 0.8 at the end" in line for line in lines)
    out = capsys.readouterr().out
    assert out.startswith(record.header(what, 2) + "\n\n") and f"written: {written and written[0]}" in out


def test_flink_comparison_with_markdown_writes_the_pair_at_that_file(tmp_path: Path, spec: StageSpec) -> None:
    from bench.flink_compare import record_run

    record = _record("flink-sql", "python -m bench --compare flink-sql --markdown bench/results/flink-latest.md")
    target = tmp_path / "flink-latest.md"
    written = record_run(record, _runs(), spec.name, "local[2]", seconds=30, rounds=2, markdown=str(target),
                         results=tmp_path / "never")
    _, document = _read(written, target, record, f"barrierflow and Flink SQL side by side, pipeline {spec.name}", 2)
    assert document["figures"]["flink_1s"] == [1.6e6, 2.0e6] and not (tmp_path / "never").exists()


# -- python -m bench --scenario upgrade -------------------------------------------------------------


def test_upgrade_keeps_every_steps_seconds_the_checks_and_the_problems(tmp_path: Path, spec: StageSpec) -> None:
    from bench.upgrade import Figure, UpgradeBenchReport, record_run

    measured = UpgradeBenchReport(keys=40_000, state_mb=12.5, session_seconds=4.0)
    measured.figures = [Figure("build", "stop --savepoint: request -> savepoint", 2.5, 1.5, "savepoint 3"),
                        Figure("4 -> 16", "upgrade: repartition", math.nan, 1.75),
                        Figure("4 -> 16", "upgrade: total (UpgradeResult.timings)", 9.25, 2.0)]
    measured.checks = ["final totals, upgraded vs never upgraded: 0 missing / 0 extra / 0 differing keys"]
    record = _record("upgrade", "python -m bench --scenario upgrade --keys 40000")
    written = record_run(record, measured, spec, ["value_max differs for 2 keys"], markdown=None, results=tmp_path)
    lines, document = _read(written, tmp_path / f"{STEM}.md", record, f"Upgrade of 40,000 keys, pipeline {spec.name}")
    figures = document["figures"]
    assert [(s["phase"], s["step"], s["seconds"], s["load"], s["note"]) for s in figures["steps"]] == [
        ("build", "stop --savepoint: request -> savepoint", 2.5, 1.5, "savepoint 3"),
        ("4 -> 16", "upgrade: repartition", None, 1.75, ""),
        ("4 -> 16", "upgrade: total (UpgradeResult.timings)", 9.25, 2.0, "")]
    assert figures["checks"] == measured.checks and figures["shapes"] == [4, 16, 4]
    assert figures["problems"] == ["value_max differs for 2 keys"] and figures["passed"] is False
    assert (figures["keys"], figures["state_mb"], figures["session_seconds"]) == (40_000, 12.5, 4.0)
    assert "| 4 -> 16 | upgrade: repartition | - | 1.8 |  |" in lines


def test_upgrade_records_the_figures_of_a_scenario_that_stopped_early(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.upgrade as upgrade

    def stopped(base: Any, root: Path, specs: Any, keys: int, measured: Any, problems: list[str]) -> None:
        measured.add("build", "run to the first checkpoint holding every key (process start included)", 3.0)
        raise upgrade.UpgradeBenchError("the build run exited 1")

    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))
    monkeypatch.setattr(upgrade, "_scenario", stopped)
    with pytest.raises(upgrade.UpgradeBenchError, match="stopped early: the build run exited 1"):
        upgrade.run_upgrade_benchmark(str(ROOT / "include" / "pipelines" / "bench.yaml"), keys=400,
                                      results=tmp_path / "records", command="python -m bench --scenario upgrade")
    (md,) = (tmp_path / "records").glob("*.md")
    document = json.loads(md.with_suffix(".json").read_text(encoding="utf-8"))
    assert document["scenario"] == "upgrade" and document["command"] == "python -m bench --scenario upgrade"
    assert [s["seconds"] for s in document["figures"]["steps"]] == [3.0]
    assert document["figures"]["problems"] == ["stopped early: the build run exited 1"]


@pytest.mark.parametrize(("argv", "module", "entry"), [
    (["--compare", "flink-sql", "--rounds", "2"], "bench.flink_compare", "run_flink_comparison"),
    (["--scenario", "upgrade", "--keys", "400"], "bench.upgrade", "run_upgrade_benchmark")])
def test_the_bench_command_passes_its_command_line_to_the_record(
        argv: list[str], module: str, entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from bench.run import main

    called: dict[str, Any] = {}
    monkeypatch.setattr(importlib.import_module(module), entry, lambda *a, **kw: called.update(kw))
    assert main([*argv, "--markdown", "a b.md"]) == 0
    assert called["command"] == "python -m bench " + " ".join(argv) + " --markdown 'a b.md'"
    assert called["markdown"] == "a b.md"


# -- bench.channel_transport ------------------------------------------------------------------------


def _transport_result(seconds: float, outcome: str = "ok", error: str = "") -> dict[str, Any]:
    steady = 150_000.0 if outcome == "ok" else math.nan
    return {"outcome": outcome, "error": error, "seconds": seconds, "steady": steady,
            "records": 6_000_000, "written": 6_000_040, "consumed": 6_000_040, "checkpoints": 15,
            "phases": {"gen": {"batches": 60, "rows": 6_000_000, "addBatch": 30.5}}}


def test_channel_transport_keeps_the_ceilings_and_every_runs_figures(tmp_path: Path) -> None:
    from bench.channel_transport import record_run, transport_run

    runs = [transport_run(2, 100_000, "after", _transport_result(48.0)),
            transport_run(3, 100_000, "after", _transport_result(math.nan, "CRASHED", "Traceback\nboom"))]
    ceilings = {"kafka-python produce": 50_000.0, "confluent-kafka produce": 1_000_000.0}
    record = _record("channel-transport", "python -m bench.channel_transport --no-baseline --stages 2,3")
    written = record_run(record, ceilings, runs, records=6_000_000, batches=[100_000], shapes=[2, 3], baseline=None,
                         cap=180.0, results=tmp_path)
    lines, document = _read(written, tmp_path / f"{STEM}.md", record, "Channel transport, 6,000,000 records per run")
    figures = document["figures"]
    assert figures["ceilings"] == ceilings and figures["stages"] == [2, 3] and figures["baseline"] is None
    assert [(r["stages"], r["writer"], r["outcome"], r["seconds"], r["records_per_second"], r["steady"])
            for r in figures["runs"]] == [(2, "after", "ok", 48.0, 125_000.0, 150_000.0),
                                          (3, "after", "CRASHED", None, 0.0, None)]
    assert figures["runs"][0]["phases"]["gen"]["addBatch"] == 30.5
    assert "- confluent-kafka produce: 1,000,000 records/s" in lines
    assert "| 2 | 100,000 | after | ok | 48.0 | 125,000 | 150,000 | 6,000,040 | 6,000,040 | 15 |" in lines
    assert "|   |   | error: Traceback ||||||||" in lines


def test_channel_transport_main_records_the_runs_that_finished(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import barrierflow.kafka_io.embedded_broker as broker

    import bench.channel_transport as transport

    @contextlib.contextmanager
    def no_broker(*_: Any) -> Iterator[str]:
        yield "127.0.0.1:1"

    calls: list[int] = []

    def variant(include: Path, servers: str, records: int, batch: int, cap: float, stages: int) -> dict[str, Any]:
        calls.append(batch)
        if len(calls) == 3:
            raise KeyboardInterrupt("stopped")
        return _transport_result(10.0 * len(calls))

    monkeypatch.setattr(broker, "embedded_broker", no_broker)
    monkeypatch.setattr(transport, "client_ceilings", lambda servers, records: {"kafka-python produce": 10.0})
    monkeypatch.setattr(transport, "run_variant", variant)
    argv = ["--records", "1000", "--batches", "10,20,30", "--no-baseline"]
    with pytest.raises(KeyboardInterrupt):
        transport.main(argv, results=tmp_path)
    (json_path,) = tmp_path.glob("*.json")
    document = json.loads(json_path.read_text(encoding="utf-8"))
    assert document["scenario"] == "channel-transport"
    assert document["command"] == "python -m bench.channel_transport " + " ".join(argv)
    assert [(r["batch"], r["seconds"]) for r in document["figures"]["runs"]] == [(10, 10.0), (20, 20.0)]
    assert document["figures"]["ceilings"] == {"kafka-python produce": 10.0}


# -- bench.atomic_cut -------------------------------------------------------------------------------


def _sinks_result(torn: int) -> dict[str, Any]:
    rows = {"expected_rows": 60, "rows": 60, "missing": 0, "extra": 0, "duplicated": 0}
    return {"kills": {"random moment": 2, "between PREPARE and COMMIT PREPARED": 1}, "completed_checkpoints": 20,
            "polls": 1200, "torn_reads": torn, "torn_examples": [{"a": 3, "b": 4}] if torn else [],
            "distinct_checkpoints_seen_by_reader": 18, "a": rows, "b": {**rows, "expected_rows": 48, "rows": 48},
            "prepared_left": 0, "passed": torn == 0}


def test_atomic_cut_sinks_run_keeps_every_figure_of_the_run(tmp_path: Path) -> None:
    from bench.atomic_cut import record_sinks_run

    record = _record("atomic-cut", "python -m bench.atomic_cut --url postgresql://x --kills 3")
    written = record_sinks_run(record, _sinks_result(torn=1), kills=3, seed=7, min_polls=300, results=tmp_path)
    what = "Torn-cut chaos run of the atomic Iceberg sinks alone, --kills 3: FAILED"
    lines, document = _read(written, tmp_path / f"{STEM}-sinks.md", record, what)
    figures = document["figures"]
    assert (figures["kind"], figures["kills"], figures["seed"], figures["min_polls"]) == ("sinks", 3, 7, 300)
    assert figures["result"] == _sinks_result(torn=1)
    assert "| b | 48 | 48 | 0 | 0 | 0 |" in lines
    kills = '{"random moment": 2, "between PREPARE and COMMIT PREPARED": 1}'
    assert f"| {kills} | 20 | 1200 | 1 | 18 | 0 | False |" in lines


def test_atomic_cut_pipeline_run_keeps_chaos_report_and_the_readers_figures(tmp_path: Path) -> None:
    from bench.atomic_cut import record_pipeline_run

    figures = {"passed": True, "problems": [], "kills": {"group": 12, "point": 8}, "polls": 15_000, "torn_reads": 0,
               "torn_examples": [], "last_read": {"a": 9}, "rows_expected": 4000, "rows": 4000, "missing": 0}
    chaos = {"pipeline": "atomic-lake", "passed": True, "events": [{"kind": "group", "at": 1.5}],
             "checkpoint_times": [0.5, 1.0]}
    record = _record("atomic-cut", "python -m bench.atomic_cut --pipeline bench/atomic_lake.yaml --kills 20")
    written = record_pipeline_run(record, Path("bench/atomic_lake.yaml"), ["chaos PASSED: pipeline atomic-lake",
                                                                          "  kills landed: 20 of 20 asked"],
                                  figures, chaos, options={"kills": 20, "seed": 1, "min_polls": 10_000},
                                  results=tmp_path)
    what = "Torn-cut chaos run of pipeline atomic_lake.yaml, --kills 20: PASSED"
    lines, document = _read(written, tmp_path / f"{STEM}-pipeline.md", record, what)
    assert document["figures"] == {"kind": "pipeline", "spec": "bench/atomic_lake.yaml",
                                   "options": {"kills": 20, "seed": 1, "min_polls": 10_000}, "figures": figures,
                                   "chaos": chaos}
    assert lines[4:6] == ["    chaos PASSED: pipeline atomic-lake", "      kills landed: 20 of 20 asked"]
    assert "| torn reads | 0 |" in lines and lines[-1] == "problems: none"


def test_atomic_cut_main_records_the_sinks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.atomic_cut as atomic_cut

    monkeypatch.setattr(atomic_cut, "run", lambda url, work, **options: {**_sinks_result(torn=0),
                                                                        "options": options})
    argv = ["--url", "postgresql+psycopg2://u@127.0.0.1:1/db", "--kills", "3", "--work", str(tmp_path / "w")]
    assert atomic_cut.main(argv, results=tmp_path / "r") == 0
    (json_path,) = (tmp_path / "r").glob("*-sinks.json")
    document = json.loads(json_path.read_text(encoding="utf-8"))
    assert document["scenario"] == "atomic-cut" and document["command"] == "python -m bench.atomic_cut " + " ".join(
        argv)
    assert document["figures"]["result"]["options"]["kills"] == 3 and document["figures"]["result"]["passed"]


# -- bench.chaos_upgrade_runs -----------------------------------------------------------------------


CHAOS_REPORT = {"passed": True, "problem": None, "kills": {"group": 3}, "kills_total": 3, "restarts": 3,
                "checkpoints": 40, "kills_by_step": {"canary": 2, "commit": 1}, "kills_by_point": {},
                "upgrades": [{"outcome": "committed"}, {"outcome": "committed"}, {"outcome": "rolled back"}],
                "runs": 4, "rows_expected": 4000, "rows": 4000, "missing": 0, "extra": 0, "duplicated": 0,
                "seconds": 90.0, "reference_seconds": 20.0, "events": [{"kind": "group", "at": 2.0}]}


def test_chaos_upgrade_run_keeps_chaos_report_and_the_command(tmp_path: Path) -> None:
    from bench.chaos_upgrade_runs import record_run

    record = _record("chaos-upgrade-runs", "python -m bench.chaos_upgrade_runs rescale --kills 3")
    shown = "barrierflow chaos $RUN/old.yaml --upgrade-to $RUN/new.yaml --scratch $RUN/scratch --json --kills 3"
    written = record_run(record, "rescale", shown, 0, CHAOS_REPORT, sizes={"records": 2000, "keys": 7, "per_batch": 40},
                         chaos_options=["--kills", "3"], results=tmp_path)
    lines, document = _read(written, tmp_path / f"{STEM}-rescale.md", record,
                            "Upgrade-mode chaos run, case rescale: PASSED")
    assert document["figures"] == {"case": "rescale", "records": 2000, "keys": 7, "per_batch": 40,
                                   "chaos_options": ["--kills", "3"], "chaos_command": shown, "exit_code": 0,
                                   "passed": True, "report": CHAOS_REPORT}
    assert "| upgrades | 3 (committed 2, rolled back 1) |" in lines
    assert '| kills by step | {"canary": 2, "commit": 1} |' in lines


def test_chaos_upgrade_runs_main_records_the_run_and_one_without_a_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.chaos_upgrade_runs as upgrade_runs

    outputs = iter([json.dumps(CHAOS_REPORT), "Traceback: no report"])
    ran: list[list[str]] = []

    def fake(command: list[str], env: Any) -> subprocess.CompletedProcess[str]:
        ran.append(list(command))
        out = next(outputs)
        return subprocess.CompletedProcess(command, 0 if out.startswith("{") else 2, stdout=out, stderr="")

    monkeypatch.setattr(upgrade_runs, "run_chaos", fake)
    assert upgrade_runs.main(["rescale", "--dir", str(tmp_path / "runs"), "--kills", "3"], results=tmp_path / "r") == 0
    assert upgrade_runs.main(["broken", "--dir", str(tmp_path / "runs")], results=tmp_path / "r") == 2
    assert ran[0][-2:] == ["--kills", "3"] and "--upgrade-to" in ran[0]
    documents = {p.name.split("-")[-1]: json.loads(p.read_text()) for p in (tmp_path / "r").glob("*.json")}
    assert sorted(documents) == ["broken.json", "rescale.json"]
    rescale, broken = documents["rescale.json"], documents["broken.json"]
    assert rescale["command"] == f"python -m bench.chaos_upgrade_runs rescale --dir {tmp_path / 'runs'} --kills 3"
    assert rescale["figures"]["report"] == CHAOS_REPORT and rescale["figures"]["chaos_options"] == ["--kills", "3"]
    assert rescale["figures"]["chaos_command"].startswith("barrierflow chaos $RUN/old.yaml --upgrade-to $RUN/new.yaml")
    assert broken["figures"]["report"] is None and broken["figures"]["exit_code"] == 2
    assert broken["what"] == "Upgrade-mode chaos run, case broken: no report"
