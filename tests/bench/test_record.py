"""bench/record.py: what every benchmark run prints and writes about itself (no Spark here)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from bench.provenance import commit
from bench.record import RunRecord, command_line, free_stem, jsonable, report


def _record() -> RunRecord:
    return RunRecord(scenario="demo", command="python -m bench --scenario demo", commit="0123456789ab",
                     started=datetime(2026, 12, 3, 16, 57, 12, tzinfo=UTC), cores=2, load_start=1.25)


def test_start_captures_the_command_commit_a_timezone_aware_start_cores_and_load() -> None:
    before = datetime.now(UTC)
    record = RunRecord.start("demo", "python -m bench --scenario demo", announce=False)
    assert record.started.tzinfo is not None and record.started.utcoffset() == timedelta(0)
    assert before <= record.started <= datetime.now(UTC)
    assert record.commit == commit() and record.cores >= 1 and record.load_start >= 0
    assert record.load_end is None
    record.finish()
    end = record.load_end
    assert end is not None and end >= 0
    record.finish()
    assert record.load_end == end  # the first figure is kept


def test_start_says_what_starts_on_the_stream(capsys: pytest.CaptureFixture[str]) -> None:
    record = RunRecord.start("demo", "python -m bench --scenario demo")
    assert f"python -m bench --scenario demo: commit {record.commit}" in capsys.readouterr().err


def test_the_header_names_what_ran_the_date_commit_cores_load_and_rounds() -> None:
    record = _record()
    record.load_end = 3.0
    assert record.header("Soak", 3) == ("Soak, 2026-12-03 16:57 UTC, commit 0123456789ab, 2 cores, load average 1.2 "
                                        "at the start, 3.0 at the end, 3 round(s)")


def test_report_prints_the_header_and_table_and_writes_both_records(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    record = _record()
    figures = {"rates": {"a": [1.0, 2.0, 3.0]}, "failed": math.nan}
    md, js = report(record, "Demo", 3, ["| a | b |", "|---|---|", "| 1 | 2 |"], figures,
                    results_dir=tmp_path / "demo", suffix="x") or (None, None)
    assert md == tmp_path / "demo" / "2026-12-03-1657-x.md" and js == md.with_suffix(".json")
    out = capsys.readouterr().out
    assert out.startswith(record.header("Demo", 3) + "\n\n| a | b |") and f"written: {md}, {js}" in out
    lines = md.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["`python -m bench --scenario demo`", "", record.header("Demo", 3)]
    assert lines[-1] == "| 1 | 2 |"
    document = json.loads(js.read_text(encoding="utf-8"))
    assert document == {"scenario": "demo", "what": "Demo", "command": "python -m bench --scenario demo",
                        "commit": "0123456789ab", "started": "2026-12-03T16:57:12+00:00", "cores": 2,
                        "load_average": [1.25, record.load_end], "rounds": 3,
                        "figures": {"rates": {"a": [1.0, 2.0, 3.0]}, "failed": None}}
    assert datetime.fromisoformat(document["started"]).tzinfo is not None


def test_a_record_of_the_same_stem_is_never_overwritten(tmp_path: Path) -> None:
    first = _record().write("Demo", 1, ["one"], {"v": [1]}, results_dir=tmp_path)
    second = _record().write("Demo", 1, ["two"], {"v": [2]}, results_dir=tmp_path)
    (tmp_path / "2026-12-03-1657-3.json").write_text("{}")  # a stray JSON alone also holds its stem
    third = _record().write("Demo", 1, ["three"], {"v": [3]}, results_dir=tmp_path)
    assert first and second and third
    assert [p.name for p in (first[0], second[0], third[0])] == ["2026-12-03-1657.md", "2026-12-03-1657-2.md",
                                                                 "2026-12-03-1657-4.md"]
    assert first[0].read_text().endswith("one\n") and json.loads(first[1].read_text())["figures"] == {"v": [1]}


def test_every_benchmark_names_its_records_through_free_stem() -> None:
    """The writers that build their own records (Nexmark, freshness) take the same stem: two runs
    started within one minute keep both records (a trial loop once lost three of twenty)."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    stems = [str(p.relative_to(bench)) for p in sorted(bench.rglob("*.py"))
             if p.name != "record.py" and "%Y-%m-%d-%H%M}\"" in p.read_text(encoding="utf-8")]
    assert stems == []
    started = datetime(2026, 12, 5, 11, 4, 59, tzinfo=timezone(timedelta(hours=2)))
    assert free_stem(Path("/nowhere"), started, "ab").name == "2026-12-05-0904-ab"  # in UTC


def test_markdown_puts_the_record_at_that_file_and_none_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "latest.md"
    written = _record().write("Demo", 1, ["t"], {}, results_dir=tmp_path / "never", markdown=str(target))
    assert written == (target, tmp_path / "sub" / "latest.json")
    assert not (tmp_path / "never").exists()
    assert _record().write("Demo", 1, ["t"], {}, results_dir=None) is None


def test_every_value_becomes_json() -> None:
    @dataclass(frozen=True)
    class Sample:
        rates: tuple[float, ...]
        path: Path

    value = {1: Sample((1.0, math.inf), Path("/x")), "when": datetime(2026, 1, 1, tzinfo=UTC), "s": {3}}
    assert jsonable(value) == {"1": {"rates": [1.0, None], "path": "/x"}, "when": "2026-01-01T00:00:00+00:00",
                               "s": [3]}


def test_the_command_line_names_the_module_a_bench_program_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    assert command_line([str(root / "bench" / "__main__.py"), "--scenario", "soak"]) == \
        "python -m bench --scenario soak"
    assert command_line([str(root / "bench" / "chaos_runs.py"), "parquet", "--markdown", "a b.md"]) == \
        "python -m bench.chaos_runs parquet --markdown 'a b.md'"
    assert command_line(["/usr/bin/tool", "-x"]) == "/usr/bin/tool -x"
    assert command_line() == command_line(sys.argv)
