"""Which outputs the upgrade canary's stream-vs-batch comparison applies to, and what it says of
the others (decided from the spec alone, before Spark reads anything): a pipeline without a
Parquet output, and a Parquet output the comparison cannot be made for, are reported as not
compared with why, in one line, never skipped silently nor called passed."""

from __future__ import annotations

from pathlib import Path

import yaml
from barrierflow.pipeline.model import open_pipeline
from barrierflow.upgrade.canary import compare_canary_output, comparison_summary

from tests.support.running_totals import totals_spec
from tests.support.windowed_canary import windowed_spec


def _changed(path: Path, change: dict[str, object]) -> Path:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.update(change)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_an_output_in_update_mode_is_not_compared_and_says_why(tmp_path: Path) -> None:
    spec = totals_spec(tmp_path, "totals.yaml", name="totals", partitions=1, records=10, keys=2, shuffle=2)
    [result] = compare_canary_output(open_pipeline(spec), None, 1, None)  # (no Spark needed)
    assert not result.ran and result.output == "sink results" and "output mode is 'update'" in result.reason
    summary = comparison_summary([result])
    assert summary["ran"] is False and summary["verdict"] == "not compared", summary
    assert summary["reason"] == f"sink results: {result.reason}" and "\n" not in summary["reason"], summary
    assert summary["outputs"][0]["verdict"] == "not compared" and summary["outputs"][0]["range"] is None


def test_a_pipeline_without_a_parquet_output_is_not_compared_and_says_why(tmp_path: Path) -> None:
    spec = _changed(windowed_spec(tmp_path, "discard.yaml"), {"sinks": [{"name": "nowhere", "type": "discard"}]})
    [result] = compare_canary_output(open_pipeline(spec), None, 1, None)
    assert not result.ran and result.output == "no Parquet output", result
    assert "writes no Parquet output (nowhere (discard))" in result.reason, result.reason


def test_an_output_without_event_time_is_not_compared_and_skipping_is_reported(tmp_path: Path) -> None:
    spec = _changed(windowed_spec(tmp_path, "plain.yaml"), {
        "event_time": None, "transformation": {"function": "barrierflow.transforms.projection:project",
                                               "output_mode": "append"}})
    [result] = compare_canary_output(open_pipeline(spec), None, 1, None)
    assert not result.ran and "no event time" in result.reason, result
    assert comparison_summary([], skipped=True) == {"ran": False, "verdict": "skipped",
                                                    "reason": "--no-canary-compare", "outputs": []}


def test_a_final_stage_behind_a_stage_writing_updates_is_not_compared_and_says_why(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from tests.support.staged_specs import two_stage_spec

    data = two_stage_spec(tmp_path, SimpleNamespace(bootstrap_servers="localhost:9"))
    data["stages"][0]["transformation"] = {"function": "barrierflow.transforms.aggregations:keyed_running_totals",
                                           "output_mode": "update"}
    spec = tmp_path / "two.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    [result] = compare_canary_output(open_pipeline(spec), None, 1, None)
    assert not result.ran and result.output == "stage b (sink out)", result
    assert "reads what stage 'a' wrote in output mode 'update'" in result.reason, result.reason
