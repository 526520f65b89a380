"""``barrierflow ... | head``: the reader going away ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PROJECT_ROOT


def test_a_reader_that_went_away_ends_the_command_with_141_and_no_traceback() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte: every write fails
    try:
        done = subprocess.run([sys.executable, "-m", "barrierflow.cli.main", "validate",
                               str(PROJECT_ROOT / "include" / "pipelines" / "demo.yaml")],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                              env={**os.environ, "BARRIERFLOW_HOME": str(PROJECT_ROOT)}, cwd=PROJECT_ROOT)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 141, done.stderr
