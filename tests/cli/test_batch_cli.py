"""Bad input to the batch commands is refused before Spark starts, naming the thing and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from barrierflow.cli.main import main

from tests.pipeline_specs import spec_dict, write_spec


@pytest.mark.parametrize(("argv", "message"), [
    (["rollup", "{spec}", "--day", "yesterday"], "day 'yesterday' is not a date: give it as YYYY-MM-DD"),
    (["recompute", "{spec}", "--end", "2026-01-01T00:00:00"], "--end '2026-01-01T00:00:00' has no timezone"),
    (["recompute", "{spec}", "--start", "soon"], "--start 'soon' is not an ISO time"),
    (["rollup", "{spec}"], "writes to a 'discard' sink: the batch side (rollups, the stream-vs-batch "
                           "comparison, data quality of the output) reads a Parquet lake; give the pipeline a "
                           "'type: parquet' sink"),
    (["recompute", "{spec}"], "'type: parquet' sink"),
    (["quality", "{spec}"], "'type: parquet' sink"),
])
def test_bad_input_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    spec = write_spec(tmp_path, spec_dict(tmp_path))  # a discard sink

    assert main([a.format(spec=spec) for a in argv]) == 2

    assert message in capsys.readouterr().err


def test_recompute_of_an_output_it_cannot_compare_says_not_compared_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An output in update mode (running totals) cannot be recomputed as the stream wrote it: the
    command says "not compared" and why in one line (exit 2, before Spark starts), the stored report says
    so too (``compared`` false, never ``passed``), and the batch job's ``--report-only`` exits 0
    so that the DAG's ``compare`` task reads that report and is skipped with the same line."""
    import json

    from barrierflow.checkpointing.store import CheckpointStore
    from barrierflow.spec import load_spec

    data = spec_dict(tmp_path)
    data["sinks"] = [{"name": "out", "type": "parquet", "path": f"file://{tmp_path / 'out'}"}]
    spec = write_spec(tmp_path, data)  # keyed_running_totals, output mode update

    assert main(["recompute", str(spec)]) == 2
    out, err = capsys.readouterr()
    [line] = out.strip().splitlines()
    assert line == ("pipeline 't': stream-vs-batch comparison not compared: its output mode is 'update': the rows "
                    "it writes depend on how the stream cut its micro-batches, a batch run gives one final row per "
                    "key (append mode only)"), line
    assert err.strip() == f"error: {line}"
    assert main(["recompute", str(spec), "--report-only", "--json", "--tag", "run-1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compared"] is False and report["passed"] is False and report["verdict"] == "not compared"
    stored = json.loads(CheckpointStore.for_spec(load_spec(spec)).objects.get_bytes("reports/recompute-latest.json"))
    assert stored["tag"] == "run-1" and stored["message"] == report["message"] and stored["stream_rows"] == 0
