"""A lost launch host made on purpose: a real detached launcher (no Spark: its attempt is a
sleeping Python process) loses its whole process tree at once, leaving no exit record; and
``barrierflow chaos --kill-kinds host`` refuses a pipeline without a ``restart:`` block."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from barrierflow.chaos.host_loss import HostLossError, lose_host, process_tree, running_launch
from barrierflow.cli.main import main
from barrierflow.ops.detached_launch import launcher_alive, read_exit, start_detached

from tests.pipeline_specs import spec_dict, write_spec

RESTART = {"type": "fixed-delay", "attempts": 3, "delay": "1s"}


def test_losing_the_host_kills_the_launchers_whole_tree_without_an_exit_record(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path, {**spec_dict(tmp_path), "restart": RESTART}, "t.yaml")
    record = start_detached(spec_path, [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                            env=dict(os.environ))
    log = Path(record.log)
    try:
        # Readiness: the attempt printed its line (the launcher started it).
        deadline = time.monotonic() + 60
        while b"up" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text(encoding="utf-8")
            time.sleep(0.05)
        assert running_launch(tmp_path / "work") == record
        tree = process_tree(record.pid)
        assert len(tree) >= 2  # the launcher and its attempt
        lost = lose_host(record)
    finally:
        if launcher_alive(record):
            os.killpg(record.pid, 9)
    assert set(tree) <= set(lost.pids)
    assert not any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text()
                   .rsplit(") ", 1)[1].split()[0] for pid in lost.pids)
    assert read_exit(record) is None and launcher_alive(record) is False  # no clean shutdown, no record
    assert "exit" not in log.read_text(encoding="utf-8").split("up", 1)[1]
    assert running_launch(tmp_path / "work") is None
    with pytest.raises(HostLossError, match="does not run on this host"):
        lose_host(record)


def test_chaos_kill_kinds_host_refuses_a_pipeline_without_a_restart_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = write_spec(tmp_path, spec_dict(tmp_path), "t.yaml")
    assert main(["chaos", str(spec_path), "--kills", "1", "--kill-kinds", "host"]) == 2
    assert "--kill-kinds host needs a restart: block" in capsys.readouterr().err
