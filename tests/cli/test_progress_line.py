"""The run progress line shows event time: late rows, paused and idle partitions, skew."""

from __future__ import annotations

import pytest
from barrierflow.cli.run import _progress_line
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


def test_the_start_steps_stand_until_the_first_batch(capsys: pytest.CaptureFixture[str]) -> None:
    from barrierflow.cli.run import _phase_line
    from barrierflow.runtime.startup import StartupPhase

    _phase_line(StartupPhase("restoring", "restoring checkpoint 3: 5 files (0.1 MB)"))
    assert capsys.readouterr().err == "starting: restoring checkpoint 3: 5 files (0.1 MB)\n"
    _progress_line(Progress(None, 0, 0.0, 0, None, 0, 0))  # nothing done yet: no line of zeros over it
    assert capsys.readouterr().err == ""
    _progress_line(Progress(0, 10, 5.0, 1, None, 0, 0))
    assert "batch=0 records=10" in capsys.readouterr().err
