"""A stage kill of ``barrierflow chaos --processes`` lands on a stage process of the run that
reported its query running, and on nothing else; without Spark: the run is a stand-in
supervisor that starts one stage process and reports it ready the way a stage does
(``_process_ready.json`` in the stage's work dir)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from barrierflow.chaos.runner import ChaosOptions, ChaosResult, ChaosRunner, _Copy
from barrierflow.runtime.stage_processes import StageProcessFiles

from tests.chaos.test_chaos_plan import staged

#: Stands in for ``barrierflow run COPY --processes``: starts a "stage process" for stage a
#: that lives until it is killed, reports it ready, and fails when it dies (as the supervisor
#: does). With ``never-ready`` it reports nothing and ends at once.
SUPERVISOR = """
import json, os, subprocess, sys
work, how = sys.argv[1], sys.argv[2]
if how == "never-ready":
    sys.exit(0)
stage = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
folder = os.path.join(work, "stages", "a")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, ".ready.tmp"), "w") as out:
    json.dump({"pid": stage.pid}, out)
os.replace(os.path.join(folder, ".ready.tmp"), os.path.join(folder, "_process_ready.json"))
sys.exit(0 if stage.wait() == 0 else 1)
"""


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not part of any run (what a stale ready file's pid may name)."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield process
    process.kill()
    process.wait()


def chaos_runner(tmp_path: Path) -> tuple[ChaosRunner, _Copy]:
    raw = staged()
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    runner = ChaosRunner(spec_path, ChaosOptions(kills=1, mode="stage", processes=True, seed=5, run_timeout=300))
    runner.result = ChaosResult("two", str(spec_path), 5, "stage", 1, str(tmp_path), datetime.now(UTC))
    return runner, _Copy(raw, "chaos", tmp_path / "chaos", "20261125230000", runner.spec)


def start(copy: _Copy, how: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(copy.root / "work"), how], start_new_session=True)


def test_a_stage_kill_waits_for_a_ready_stage_process_of_the_run_and_kills_only_it(
        tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    runner, copy = chaos_runner(tmp_path)
    # a killed run's ready file for stage b, naming a live process that is not the run's
    stale = StageProcessFiles(copy.root / "work" / "stages" / "b")
    stale.clear()
    stale.mark_ready(bystander.pid)
    run = start(copy, "ready")
    try:
        landed = runner._kill_stage(run, copy, deadline=float("inf"), log=tmp_path / "run.log")
        assert landed == "stage:a"
        assert run.wait(timeout=60) == 1  # the stand-in supervisor saw its stage die
        assert bystander.poll() is None  # the stale file's pid was never a candidate
    finally:
        run.kill()
        run.wait()
    ready = StageProcessFiles(copy.root / "work" / "stages" / "a").ready_pid()
    assert ready is not None and runner._ready_stages(run, copy) == {}  # gone with its run


def test_a_stage_kill_lands_nowhere_when_the_run_ends_before_a_stage_is_ready(
        tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    runner, copy = chaos_runner(tmp_path)
    stale = StageProcessFiles(copy.root / "work" / "stages" / "a")
    stale.clear()
    stale.mark_ready(bystander.pid)
    run = start(copy, "never-ready")
    assert runner._kill_stage(run, copy, deadline=float("inf"), log=tmp_path / "run.log") is None
    assert run.returncode == 0 and bystander.poll() is None


def test_the_kinds_of_kill_the_options_can_make(tmp_path: Path) -> None:
    runner, _ = chaos_runner(tmp_path)
    assert runner.kill_kinds() == ["point", "stage"]
    runner.options = ChaosOptions(kills=1, mode="mixed", processes=True, point_share=0)
    assert runner.kill_kinds() == ["group", "jvm", "stage"]
    runner.options = ChaosOptions(kills=1, mode="jvm", point_share=1)
    assert runner.kill_kinds() == ["point"]
    assert json.loads(json.dumps(runner.result.as_dict()))["kill_kinds"] == []
