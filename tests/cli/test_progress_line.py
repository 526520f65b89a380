"""The run progress line shows event time: late rows, paused and idle partitions, skew."""

from __future__ import annotations

import pytest
from barrierflow.cli.main import _progress_line
from barrierflow.runtime.event_time import EventTimeStatus
from barrierflow.runtime.job import Progress


def test_progress_line_with_and_without_event_time(capsys: pytest.CaptureFixture[str]) -> None:
    _progress_line(Progress(7, 1000, 50.0, 3, 2, 0, 0))
    plain = capsys.readouterr().err
    assert "batch=7" in plain and "late_dropped" not in plain
    _progress_line(Progress(7, 1000, 50.0, 3, 2, 0, 0, EventTimeStatus(42, ["0"], ["3"], 1.5)))
    line = capsys.readouterr().err
    assert "late_dropped=42 paused=0 idle=3 wm_skew=1.5s" in line
    _progress_line(Progress(7, 1000, 50.0, 3, 2, 0, 0, EventTimeStatus(0)))
    assert "late_dropped=0 paused=- idle=- wm_skew=-" in capsys.readouterr().err
