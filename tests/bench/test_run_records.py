"""Every benchmark prints what it ran and writes its record (bench/record.py): each module's
record writer, called with made-up figures, writes the .md and .json with every round's values;
and each benchmark's entry point starts a record (no Spark, Kafka or PostgreSQL here)."""

from __future__ import annotations

import importlib
import inspect
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from barrierflow.spec import load_spec
from barrierflow.spec.models import StageSpec

from bench import record as shared
from bench.record import RESULTS, RunRecord

ROOT = Path(__file__).resolve().parents[2]

#: module -> (its entry point, its default record folder under bench/results/)
ENTRIES = {
    "bench.abs_overhead": ("run_benchmark", "abs-overhead"),
    "bench.restore_time": ("run_restore_benchmark", "restore-time"),
    "bench.lake_commit": ("run_lake_commit_benchmark", "lake-commit"),
    "bench.upload_cpu": ("run_upload_cpu_benchmark", "upload-cpu"),
    "bench.soak": ("run_soak_benchmark", "soak"),
    "bench.stages": ("run_stages_benchmark", "stages"),
    "bench.scale": ("run_scale_benchmark", "scale"),
    "bench.event_time": ("run_event_time_benchmark", "event-time"),
    "bench.kafka_source": ("main", "kafka-source"),
    "bench.kafka_decoding": ("main", "kafka-side-by-side"),
    "bench.chaos_runs": ("main", "chaos-runs"),
    "bench.checkpoint_cost": ("run_checkpoint_cost", "checkpoint-cost"),
}


def _record(scenario: str = "demo") -> RunRecord:
    return RunRecord(scenario=scenario, command=f"python -m bench --scenario {scenario}", commit="0123456789ab",
                     started=datetime(2026, 12, 4, 9, 5, tzinfo=UTC), cores=2, load_start=0.5, load_end=0.75)


def _read(written: tuple[Path, Path] | None, folder: Path, name: str = "2026-12-04-0905") -> tuple[str, Any]:
    """The record's text and JSON, checked to be where and what the shared writer promises."""
    assert written == (folder / f"{name}.md", folder / f"{name}.json")
    text = written[0].read_text(encoding="utf-8")
    document = json.loads(written[1].read_text(encoding="utf-8"))
    assert text.startswith("`python -m bench --scenario ") and "commit 0123456789ab, 2 cores" in text
    assert document["commit"] == "0123456789ab" and document["load_average"] == [0.5, 0.75]
    assert document["started"] == "2026-12-04T09:05:00+00:00"
    return text, document


@pytest.fixture(scope="module")
def spec() -> StageSpec:
    return load_spec(str(ROOT / "include" / "pipelines" / "bench.yaml"))


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_each_benchmark_starts_a_record_and_reports_it_into_its_folder(name: str) -> None:
    module = importlib.import_module(name)
    entry, folder = ENTRIES[name]
    assert module.RunRecord is shared.RunRecord and module.report is shared.report
    assert "RunRecord.start(" in inspect.getsource(getattr(module, entry))
    assert module.RESULTS == RESULTS / folder


def test_freshness_records_its_commit_load_and_json() -> None:
    source = inspect.getsource(importlib.import_module("bench.freshness").run_freshness_benchmark)
    assert "from bench.provenance import commit" in source and "getloadavg" in source and '".json"' in source


def test_abs_overhead_keeps_every_rounds_figures_per_mode(tmp_path: Path, spec: StageSpec,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from bench.abs_overhead import record_run
    from bench.modes import MODES, Sample

    samples = {m.name: Sample(throughput=[100.0 + i, 90.0 + i], checkpoints=[3, 4], sync_ms=[1.0], async_ms=[2.0],
                              incremental_bytes=[10], gc_seconds=[0.1, 0.2], records_per_cpu_second=[5.0, 6.0])
               for i, m in enumerate(MODES)}
    written = record_run(_record("abs-overhead"), samples, spec, seconds=5, rounds=2, store=None, modes=MODES,
                         interleave=None, bandwidths=None, markdown=None, results=tmp_path)
    text, document = _read(written, tmp_path)
    assert document["rounds"] == 2 and "| no checkpoints |" in text
    assert document["figures"]["modes"][MODES[0].name]["throughput"] == [100.0, 90.0]
    assert capsys.readouterr().out.startswith(f"ABS overhead, pipeline {spec.name}, 2026-12-04 09:05 UTC")


def test_restore_keeps_every_rounds_sample(tmp_path: Path, spec: StageSpec) -> None:
    from bench.restore_time import RestoreSample, record_run

    samples = [RestoreSample("hdfs", 10**8, 40, 1.0 + r, 2.0, 1.5) for r in range(3)]
    _, document = _read(record_run(_record("restore"), samples, spec, keys=1000, rounds=3, session_seconds=4.0,
                                   markdown=None, results=tmp_path), tmp_path)
    assert [s["restore_seconds"] for s in document["figures"]["samples"]] == [1.0, 2.0, 3.0]
    assert document["figures"]["samples"][0]["total_seconds"] == 3.0


def test_restore_splits_the_first_batch_into_its_trigger_and_the_rest() -> None:
    from bench.restore_time import first_trigger_seconds

    progress = [{"batchId": 4, "durationMs": {"triggerExecution": 9000}},
                {"batchId": 5, "durationMs": {"latestOffset": 3}},
                {"batchId": 6, "durationMs": {"triggerExecution": 1500}},
                {"batchId": 7, "durationMs": {"triggerExecution": 20}}]
    assert first_trigger_seconds(progress, 4) == [1.5]
    assert first_trigger_seconds(progress, 7) == []


def test_lake_commit_keeps_every_checkpoints_milliseconds(tmp_path: Path) -> None:
    from bench.lake_commit import record_run

    rows = [("iceberg: commit", [0.010, 0.020, 0.030])]
    text, document = _read(record_run(_record("lake-commit"), 3, rows, markdown=None, results=tmp_path), tmp_path)
    assert document["figures"]["steps_ms"] == {"iceberg: commit": pytest.approx([10.0, 20.0, 30.0])}
    assert "| iceberg: commit | 20.0 |" in text


def test_upload_cpu_keeps_every_rounds_sample(tmp_path: Path) -> None:
    from bench.upload_cpu import ROWS, UploadCpuSample, record_run

    by_row = {row: [UploadCpuSample(row, 1.0 + r, 0.5, None, 100.0) for r in range(2)] for row in ROWS}
    _, document = _read(record_run(_record("upload-cpu"), by_row, upload_mb=4, bandwidth=20, rounds=2, markdown=None,
                                   results=tmp_path), tmp_path)
    assert [s["client_ms_per_mb"] for s in document["figures"]["rows"]["hash"]] == [1.0, 2.0]


def test_soak_keeps_every_sample_and_the_verdict(tmp_path: Path) -> None:
    from bench.soak import ProcessFigures, SoakReport, SoakSample, record_run

    soak = SoakReport(checkpoints=300, interval=0.1)
    soak.samples = [SoakSample(100 * i, float(i), 2**20, 60, 2**20, ProcessFigures(150.0, 11, 11),
                               ProcessFigures(1450.0, 300, 300)) for i in (1, 2, 3)]
    text, document = _read(record_run(_record("soak"), soak, markdown=None, results=tmp_path), tmp_path)
    assert [s["checkpoints"] for s in document["figures"]["samples"]] == [100, 200, 300]
    assert document["figures"]["problems"] == [] and "Bounded: yes" in text


def test_stages_keep_every_checkpoints_figures_and_markdown_overrides_the_folder(tmp_path: Path) -> None:
    from bench.stages import ModeFigures, record_run

    figures = [ModeFigures("aligned", 3, 0, [1000.0, 1200.0], [5.0, 6.0], [0, 0], 0.0, (50.0, 60.0)),
               ModeFigures("unaligned", 3, 0, [900.0, 950.0], [0.0, 0.0], [10, 12], 0.0, (40.0, 45.0))]
    target = tmp_path / "given" / "stages.md"
    written = record_run(_record("stages"), figures, seconds=10, interval=1, rate=100, processes=False,
                         markdown=str(target), results=tmp_path / "never")
    _read(written, target.parent, "stages")
    document = json.loads(target.with_suffix(".json").read_text())
    assert document["figures"]["modes"][0]["duration_ms"] == [1000.0, 1200.0] and not (tmp_path / "never").exists()


def test_scale_keeps_every_checkpoints_and_verifications_milliseconds(tmp_path: Path) -> None:
    from bench.scale import ScaleResult, record_run

    figures = [ScaleResult(100, 0.1, 0.1, 5.0, 900, 2.0, 30.0, 2, (4.0, 6.0), (1.5, 2.5))]
    _, document = _read(record_run(_record("scale"), figures, plan_calls=10, markdown=None, results=tmp_path),
                        tmp_path)
    assert document["figures"]["sizes"][0]["checkpoint_ms_each"] == [4.0, 6.0]
    assert document["figures"]["sizes"][0]["verify_ms_each"] == [1.5, 2.5]


def test_event_time_records_are_named_after_their_scenario(tmp_path: Path, spec: StageSpec) -> None:
    from bench.event_time import MODES, ModeSample, record_run

    for scenario in ("batch-sizing", "alignment"):
        samples = {name: ModeSample(throughput=[1.0, 2.0], total_ms=[3.0], barrier_batch_ms=[4.0], checkpoints=[1, 1],
                                    late_rows=[0, 7]) for name, _ in MODES[scenario]}
        written = record_run(_record(scenario), scenario, samples, spec, seconds=5, rounds=2, markdown=None,
                             results=tmp_path)
        _, document = _read(written, tmp_path, f"2026-12-04-0905-{scenario}")
        assert document["scenario"] == scenario
        assert all(m["throughput"] == [1.0, 2.0] for m in document["figures"]["modes"].values())


def test_kafka_source_keeps_every_round_of_the_side_by_side(tmp_path: Path) -> None:
    from bench.kafka_source import record_run

    figures = {"records": 400, "text": "plain", "partitions": 4, "ceilings": {"produce": 1e6},
               "side_by_side": {"spark": {"steady": 2.0, "rounds": [1.0, 2.0, 3.0]}}, "decoder_fallback": math.nan}
    text, document = _read(record_run(_record("kafka"), ["| figure | records/s |", "|---|---:|"], figures, rounds=3,
                                      results=tmp_path), tmp_path)
    assert document["figures"]["side_by_side"]["spark"]["rounds"] == [1.0, 2.0, 3.0]
    assert document["figures"]["decoder_fallback"] is None and text.endswith("|---|---:|\n")


def test_kafka_decoding_keeps_every_rounds_rate(tmp_path: Path) -> None:
    from bench.kafka_decoding import MODES, record_run

    rates = {mode: [100.0, 200.0, 300.0] for mode in MODES}
    written = record_run(_record("kafka-decoding"), rates, 0.25, sample=1000, records=4000, text="plain", rounds=3,
                         results=tmp_path)
    text, document = _read(written, tmp_path, "2026-12-04-0905-decoding")
    assert document["figures"]["records_per_second"]["variant"] == [100.0, 200.0, 300.0]
    assert "| none | 200 | 100, 200, 300 |" in text


def test_chaos_runs_record_each_runs_verdict(tmp_path: Path) -> None:
    from bench.chaos_runs import ChaosRun, record_runs

    chaos = "barrierflow chaos $RUN/pipeline.yaml --kills 3"
    runs = [ChaosRun("parquet", chaos, datetime(2026, 12, 4, 9, 6, tzinfo=UTC), 1, 0, 2.5, "PASS: kills 3"),
            ChaosRun("kafka", chaos, datetime(2026, 12, 4, 9, 9, tzinfo=UTC), 1, 1, 4.0, "FAIL (rows differ): kills 3")]
    text, document = _read(record_runs(_record("chaos-runs"), runs, kills=3, results=tmp_path), tmp_path)
    assert [(r["pipeline"], r["exit_code"], r["minutes"], r["verdict"]) for r in document["figures"]["runs"]] == [
        ("parquet", 0, 2.5, "PASS: kills 3"), ("kafka", 1, 4.0, "FAIL (rows differ): kills 3")]
    assert document["figures"]["runs"][0]["started"] == "2026-12-04T09:06:00+00:00"
    assert "| kafka | `barrierflow chaos $RUN/pipeline.yaml --kills 3` | 2026-12-04 09:09 | 1 | 1 | 4.0 |" in text
    assert runs[0].row() == ("| parquet | `barrierflow chaos $RUN/pipeline.yaml --kills 3` | 2026-12-04 09:06 | 1 "
                             "| PASS: kills 3 |")


def test_checkpoint_cost_keeps_every_run_and_names_the_job(tmp_path: Path) -> None:
    from bench.checkpoint_cost import PARTS, WITH, WITHOUT, RunFigures, record_run

    parts = {1: {p: 10.0 for p in PARTS}}
    runs = [RunFigures(mode, number, rate, 1000, 2, 1, 0.5, 2.0, 0.1, parts, {1: "other"})
            for number, (mode, rate) in enumerate([(WITHOUT, 100.0), (WITH, 95.0)], 1)]
    text, document = _read(record_run(_record("checkpoint-cost"), "reference", "w", runs, rounds=1, results=tmp_path),
                           tmp_path, "2026-12-04-0905-reference")
    assert [r["rate"] for r in document["figures"]["runs"]] == [100.0, 95.0]
    assert document["figures"]["runs"][0]["batch_parts"]["1"]["triggerExecution"] == 10.0
    assert "Checkpoint cost, reference job: python -m bench --scenario checkpoint-cost" in text


def test_the_bench_command_names_its_arguments() -> None:
    from argparse import Namespace

    from bench.run import _command

    assert _command(Namespace(argv=["--scenario", "soak", "--markdown", "a b.md"])) == \
        "python -m bench --scenario soak --markdown 'a b.md'"


def test_chaos_runs_main_appends_each_row_and_records_the_runs_that_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.chaos_runs as chaos_runs

    def fake_run(pipeline: str, args: Any) -> Any:
        if pipeline == "kafka":
            raise KeyboardInterrupt("stopped")
        return chaos_runs.ChaosRun(pipeline, f"barrierflow chaos --kills {args.kills}", datetime.now(UTC), args.seed,
                                   3, 0.5, "PASS: kills 2")

    monkeypatch.setattr(chaos_runs, "run_one", fake_run)
    rows = tmp_path / "rows.md"
    assert chaos_runs.main(["parquet", "cycle", "--kills", "2", "--markdown", str(rows)], results=tmp_path / "r") == 3
    assert [line.split(" | ")[0] for line in rows.read_text().splitlines()] == ["| parquet", "| cycle"]
    with pytest.raises(KeyboardInterrupt):
        chaos_runs.main(["stages", "kafka", "--kills", "2"], results=tmp_path / "r")
    documents = sorted((json.loads(p.read_text()) for p in (tmp_path / "r").glob("*.json")),
                       key=lambda d: len(d["figures"]["runs"]))  # the same minute: a stem and its "-2"
    assert [[r["pipeline"] for r in d["figures"]["runs"]] for d in documents] == [["stages"], ["parquet", "cycle"]]
    assert documents[1]["command"] == "python -m bench.chaos_runs parquet cycle --kills 2 --markdown " + str(rows)
