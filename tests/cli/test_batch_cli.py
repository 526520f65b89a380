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
