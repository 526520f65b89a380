"""`python -m bench.chaos_runs`: the specs of the recorded chaos runs are valid pipelines sized
as asked, and the summary row says what chaos reported (the runs themselves are in
bench/results/chaos-runs.md; no Spark here)."""

from __future__ import annotations

from pathlib import Path

from barrierflow.chaos.scratch import check_judgeable
from barrierflow.spec.loader import load_any_spec

from bench.chaos_runs import prepared, summary_line


def test_every_file_backed_pipeline_is_a_valid_bounded_spec_sized_as_asked(tmp_path: Path) -> None:
    for pipeline in ("parquet", "stages", "cycle"):
        with prepared(pipeline, tmp_path / pipeline, 9000) as (spec_path, env):
            spec = load_any_spec(spec_path)
            check_judgeable(spec)
            assert env == {}
            text = spec_path.read_text(encoding="utf-8")
            assert str(tmp_path / pipeline) in text and "var/" not in text  # nothing lands in the repository
    stages = load_any_spec(tmp_path / "stages" / "pipeline.yaml")
    sizes = [s.records_per_partition for stage in stages.stages for s in stage.sources if s.type == "generator"]
    assert sizes == [9000, 4500]  # the example's 2:1, the largest at the size asked


def test_summary_line_names_the_verdict_and_every_count() -> None:
    report = {"passed": False, "problem": None, "kills_total": 100, "kills": {"group": 40, "jvm": 35, "point": 25},
              "restarts": 100, "checkpoints": 812, "rows": 7001, "rows_expected": 7000, "missing": 0, "extra": 0,
              "duplicated": 1, "seconds": 1500.0, "reference_seconds": 95.4}
    assert summary_line(report) == (
        "FAIL (rows differ): kills 100 (group 40, jvm 35, point 25), restarts 100, checkpoints 812, "
        "rows 7001 of 7000, missing 0, extra 0, duplicated 1, 25.0 min under kills (reference 95 s)")
