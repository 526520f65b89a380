"""``barrierflow chaos`` itself, short (a few kills, small data), through its command line.

1. A two-stage pipeline (generator -> a -> channel on the suite's Apache Kafka broker -> b ->
   Parquet through 2PC) under kills of three kinds (the process group, the driver's JVM, a crash at a
   protocol point): the command reports 0 missing, 0 extra and 0 duplicated rows and exits 0.
   b reads one channel partition four times slower, aligned with a 1 ms timeout: its
   checkpoints go timed-out with channel state, so the restores replay channel state.
2. With every stage in a process of its own (``--processes``) and the channel on the embedded
   broker (which the supervisor runs), a stage kill: it waits until a
   stage process reported ready, so it lands as a stage kill; the dead letters are compared,
   and the stores the spec names (dead letters and event times too) are listed before and
   after: chaos's copies wrote none of them.
3. Deliberately broken sinks (tests/scenarios/chaos_doubles/sitecustomize.py): on a pipeline
   with two final stages, one sink commits every epoch twice after a restart and the other loses
   the first epoch it commits after a restart. One kill at ``after_global_manifest`` (a global
   checkpoint complete, the final stages' sinks not yet told) is enough: chaos must name the
   duplicated rows of the first and the missing rows of the second, and exit 1.

The recorded runs of 100 kills are in bench/results/chaos-runs.md.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.cli.main import main

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM
from tests.support.kafka_broker import KafkaEndpoint

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(120)]
DOUBLES = Path(__file__).resolve().with_name("chaos_doubles")


def pipeline(tmp_path: Path, finals: list[str], *, records: int, rate: float, alignment_timeout: str = "0s",
             slow_factor: float = 1.0, malformed_every: int = 0, shared_paths: bool = False,
             broker: KafkaEndpoint | None = None, sinks: dict[str, dict[str, Any]] | None = None) -> Path:
    """gen -> channel c -> one stage per name in ``finals``, each into a
    Parquet sink of that name; aligned checkpoints, switching to unaligned after
    ``alignment_timeout`` (0s: never). The final stages read c's partition 1 at
    ``slow_factor`` times partition 0's credit. ``malformed_every``: every k-th generated
    record goes to the dead letters; ``shared_paths``: explicit ``dead_letter_path`` and
    ``event_times_path`` (``dead-letter``, ``event-times`` under ``tmp_path``). The channel is on
    ``broker`` (the suite's Apache Kafka, a fresh topic), else on the embedded broker that each
    run of the pipeline starts (``bootstrap: embedded``). ``sinks``: a final stage's sink other
    than Parquet, by the stage's name."""
    channel: dict[str, Any] = {"name": "c", "partitions": 2, "bootstrap": "embedded"}
    if broker is not None:
        channel.update(bootstrap=broker.bootstrap_servers, topic=f"chx-c-{uuid.uuid4().hex[:8]}")
    data = {
        "version": 1, "name": "chx", "work_dir": str(tmp_path / "work"),
        "channels": [channel],
        "stages": [
            {"name": "gen",
             "sources": [{"name": "events", "type": "generator", "partitions": 2, "rows_per_second": rate,
                          "max_records_per_batch": 40, "keys": 7, "records_per_partition": records,
                          "malformed_every": malformed_every}],
             "transformation": {"function": "barrierflow.transforms.projection:project",
                                "options": {"columns": {"src_partition": "partition", "src_offset": "offset",
                                                        "key": "key", "value": "value"}}},
             "sinks": [{"type": "channel", "channel": "c"}]},
            *({"name": name,
               "sources": [{"type": "channel", "channel": "c", "max_records_per_batch": 50,
                            "partition_rate_factors": [1, slow_factor],
                            "json_fields": {"src_partition": "long", "src_offset": "long", "key": "long",
                                            "value": "long"}}],
               "transformation": {"function": "barrierflow.transforms.projection:project",
                                  "options": {"columns": {"src_partition": "src_partition",
                                                          "src_offset": "src_offset", "value": "value"}}},
               "sinks": [(sinks or {}).get(name) or {"name": name, "type": "parquet",
                                                     "path": f"file://{tmp_path / 'out' / name}"}]}
              for name in finals),
        ],
        "trigger": {"interval": "100ms"},
        "checkpoint": {"storage": f"file://{tmp_path / 'chk'}", "interval": "700ms", "timeout": "120s",
                       "alignment_timeout": alignment_timeout},
        "spark": {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM},
    }
    if shared_paths:
        data.update(dead_letter_path=f"file://{tmp_path / 'dead-letter'}",
                    event_times_path=f"file://{tmp_path / 'event-times'}")
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def chaos(spec: Path, scratch: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["chaos", str(spec), "--scratch", str(scratch), "--json", *args])
    captured = capsys.readouterr()
    assert captured.out, f"chaos printed no report (exit {code}): {captured.err[-3000:]}"
    return code, json.loads(captured.out)


@pytest.fixture
def driver_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in short_lived_driver_env().items():
        monkeypatch.setenv(name, value)


@pytest.mark.usefixtures("driver_env")
def test_chaos_passes_a_two_stage_pipeline_under_kills_of_every_kind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: dict[str, Any],
        kafka_endpoint: KafkaEndpoint) -> None:
    # ``out`` reads c's partition 1 at a quarter of partition 0's credit, with a 1 ms alignment
    # timeout: a checkpoint is overdue when ``out`` first sees its barrier, and where the two
    # barriers are not read in one plan it goes timed-out (cut where ``out`` stands, the slow
    # partition's records before its barrier being channel state), so the kills land on restores
    # of channel state. (Kills over aligned checkpoints: tests/scenarios/test_staged_crashes.py.)
    spec = pipeline(tmp_path, ["out"], records=700, rate=40, alignment_timeout="1ms", slow_factor=0.25,
                    broker=kafka_endpoint)
    code, report = chaos(spec, tmp_path / "scratch", capsys, "--kills", "3", "--seed", "11", "--mode", "mixed",
                         "--min-gap", "8", "--max-gap", "14", "--point-share", "0.34")
    figures.update({key: report[key] for key in ("kills", "runs", "checkpoints", "rows_expected", "rows", "missing",
                                                 "extra", "duplicated", "seconds")})
    assert report["problem"] is None, report["problem"]
    assert report["kills_total"] == 3 and report["rows_expected"] == 1400
    assert (report["missing"], report["extra"], report["duplicated"]) == (0, 0, 0)
    assert code == 0 and report["passed"]
    store = tmp_path / "scratch" / "chaos" / "checkpoints"  # chaos runs on a copy of the pipeline
    modes = [json.loads(p.read_text())["alignment"] for p in store.glob("stages/out/chk-*/_metadata.json")]
    figures["out's checkpoints: mode, channel-state records"] = sorted(
        (m["mode"], m["channel_state_records"]) for m in modes if m)
    assert {m["mode"] for m in modes if m} <= {"aligned", "aligned-timed-out"}, modes
    assert any(m and m["mode"] == "aligned-timed-out" and m["channel_state_records"] > 0 for m in modes), modes
    assert (tmp_path / "scratch" / "chaos-report.html").is_file()
    # ... and in the pipeline's own store, where the Checkpoints page links to it
    assert json.loads((tmp_path / "chk" / "reports" / "chaos-latest.json").read_text())["passed"] is True
    assert "data:image/png;base64," in (tmp_path / "chk" / "reports" / "chaos-latest.html").read_text()


def stores(tmp_path: Path) -> dict[str, str]:
    """Every file under the pipeline's own stores (work dir, checkpoints, output, dead letters,
    event times) with its size, as a listing to compare."""
    return {str(p.relative_to(tmp_path)): str(p.stat().st_size)
            for store in ("work", "chk", "out", "dead-letter", "event-times")
            for p in sorted((tmp_path / store).rglob("*")) if p.is_file()}


@pytest.mark.usefixtures("driver_env")
def test_chaos_kills_a_stage_process_and_writes_none_of_the_pipelines_stores(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: dict[str, Any]) -> None:
    """``--processes --mode stage``: the kill waits for a stage process that reported ready, so it
    lands as a stage kill; the dead letters (every 25th record malformed) are compared; and the
    stores the spec names, dead letters and event times included, hold after chaos what they
    held before (only chaos's own latest report is added to the checkpoint store)."""
    spec = pipeline(tmp_path, ["out"], records=500, rate=40, malformed_every=25, shared_paths=True)
    for store in ("work", "chk", "out", "dead-letter", "event-times"):
        (tmp_path / store).mkdir(exist_ok=True)
        (tmp_path / store / "the-pipelines-own").write_text(store)
    before = stores(tmp_path)
    code, report = chaos(spec, tmp_path / "scratch", capsys, "--processes", "--mode", "stage", "--kills", "1",
                         "--point-share", "0", "--seed", "5", "--min-gap", "5", "--max-gap", "8")
    figures.update({key: report[key] for key in ("kills", "kills_picked", "runs", "rows_expected", "rows", "missing",
                                                 "extra", "duplicated", "dead_letters_expected", "dead_letters",
                                                 "seconds")})
    assert report["problem"] is None, report["problem"]
    assert report["kills"] == {"stage": 1} and report["kills_picked"] == {"stage": 1}
    kills = [e["detail"].split(" ")[0] for e in report["events"] if e["kind"] == "kill"]
    assert len(kills) == 1 and kills[0] in ("stage:gen", "stage:out"), kills
    assert report["dead_letters_expected"] == report["dead_letters"] == 2 * 500 // 25
    assert report["rows_expected"] == 2 * (500 - 500 // 25)
    assert (report["missing"], report["extra"], report["duplicated"]) == (0, 0, 0)
    assert code == 0 and report["passed"]
    after = stores(tmp_path)
    assert sorted(set(after) - set(before)) == ["chk/reports/chaos-latest.html", "chk/reports/chaos-latest.json"]
    assert {key: after[key] for key in before} == before


@pytest.mark.usefixtures("driver_env")
def test_chaos_catches_a_sink_that_commits_twice_and_one_that_loses_an_epoch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        figures: dict[str, Any], kafka_endpoint: KafkaEndpoint) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(DOUBLES), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CHAOS_BROKEN_SINKS", "dup=twice,lose=lose")
    monkeypatch.setenv("CHAOS_BROKEN_DIR", str(tmp_path / "broken"))
    spec = pipeline(tmp_path, ["dup", "lose"], records=300, rate=0, broker=kafka_endpoint)
    code, report = chaos(spec, tmp_path / "scratch", capsys, "--kills", "1", "--seed", "3", "--point-share", "1",
                         "--points", "after_global_manifest")
    outputs = {o["sink"]: o for o in report["outputs"]}
    figures.update({f"{sink} missing/extra/duplicated": (o["missing"], o["extra"], o["duplicated"])
                    for sink, o in outputs.items()})
    assert report["kills"] == {"point": 1}
    assert outputs["dup"]["duplicated"] > 0 and outputs["dup"]["missing"] == 0
    assert outputs["lose"]["missing"] > 0 and outputs["lose"]["duplicated"] == 0
    assert code == 1 and not report["passed"]


@pytest.mark.usefixtures("driver_env")
def test_chaos_passes_an_iceberg_and_a_delta_table_under_kills_and_writes_neither_of_the_specs_tables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], figures: dict[str, Any],
        kafka_endpoint: KafkaEndpoint) -> None:
    """gen -> channel -> final stage ``ice`` into an Iceberg table (the default SQLite catalog) and
    final stage ``dl`` into a Delta table, 3 crashes at the points around the table commits (seed
    4: one between a table commit and its ledger record, the in-doubt case). chaos reads the tables with
    pyiceberg and ``deltalake``: 0 missing, extra, duplicated per format, and no checkpoint id
    with two commits in either table's history; the spec's own catalog and tables never exist."""
    delta_path = tmp_path / "lake" / "rows"
    spec = pipeline(tmp_path, ["ice", "dl"], records=200, rate=0, broker=kafka_endpoint,
                    sinks={"ice": {"name": "ice", "type": "iceberg", "table": "lake.rows"},
                           "dl": {"name": "dl", "type": "delta", "path": f"file://{delta_path}"}})
    code, report = chaos(spec, tmp_path / "scratch", capsys, "--kills", "3", "--seed", "4", "--point-share", "1",
                         "--points", "mid_sink_commit,after_global_manifest,after_precommit")
    figures.update({key: report[key] for key in ("kills", "runs", "checkpoints", "formats", "seconds")})
    assert report["problem"] is None, report["problem"]
    assert report["kills"] == {"point": 3}
    points = [e["detail"] for e in report["events"] if e["kind"] == "point"]
    assert any(p.startswith("mid_sink_commit@") for p in points), points  # the in-doubt case, in the table sinks
    formats = report["formats"]
    assert set(formats) == {"iceberg", "delta"}
    for kind in ("iceberg", "delta"):
        assert formats[kind]["rows_expected"] == formats[kind]["rows"] == 2 * 200, formats
        assert (formats[kind]["missing"], formats[kind]["extra"], formats[kind]["duplicated"]) == (0, 0, 0)
        assert formats[kind]["commits"] > 1 and formats[kind]["commits_repeated"] == 0, formats
    assert code == 0 and report["passed"]
    # the copies wrote scratch tables: the spec's catalog (under its work dir) and Delta path were never made
    assert not (tmp_path / "work").exists() and not delta_path.exists()
