"""A dead Spark JVM ends ``barrierflow run`` with one ``error:`` line naming what died and the
checkpoint the next run resumes from; the Py4J tracebacks behind it show only with ``--verbose``.

The first test SIGKILLs the driver JVM of a real ``run`` (a subprocess driver, found in its
process tree once two checkpoints completed); the others check the rendering without Spark: a
stand-in for the run that logs as Py4J does and raises what ``run`` raises for a dead JVM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from barrierflow.chaos.runner import _command_name, _descendants
from barrierflow.metrics import read_address
from barrierflow.pipeline.model import open_pipeline

from tests.drivers import short_lived_driver_env
from tests.pipeline_specs import spec_dict

#: How long the driver may take to start and complete two checkpoints, and to end after the kill.
START_TIMEOUT, END_TIMEOUT = 240.0, 180.0


@pytest.mark.slow(60)
def test_a_killed_driver_jvm_is_one_error_line_naming_it_and_the_checkpoint(tmp_path: Path) -> None:
    data = spec_dict(tmp_path, source={"rows_per_second": 200, "max_records_per_batch": 100},
                     trigger={"interval": "200ms"}, metrics={"port": 0},
                     spark={"master": "local[1]", "shuffle_partitions": 1})
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    store = open_pipeline(spec).stages[0].store
    driver = subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec), "--quiet"],
                              env={**os.environ, **short_lived_driver_env()}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while len(store.checkpoint_ids()) < 2:  # the run is under way: two checkpoints completed
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "no two checkpoints in time"
            time.sleep(0.2)
        [jvm] = [pid for pid in _descendants(driver.pid) if _command_name(pid) == "java"]
        assert read_address(tmp_path / "work") is not None  # served while it ran
        os.kill(jvm, signal.SIGKILL)
        _, err = driver.communicate(timeout=END_TIMEOUT)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()

    assert driver.returncode == 1, err
    newest = store.latest()
    assert newest is not None
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: the Spark driver JVM (pid {jvm}, killed by SIGKILL) died while pipeline t ran; "
                      f"'barrierflow run {spec}' resumes exactly once from checkpoint {newest.checkpoint_id}, the "
                      f"newest completed one in {store.uri}"], err
    assert "Traceback" not in err and "Py4J" not in err, err
    assert read_address(tmp_path / "work") is None  # the metrics address file went with the run


#: Stands in for ``barrierflow [--verbose] run``: logs a failed call as Py4J's gateway does
#: (its module's file name, the root logger, with a traceback), then fails as ``run`` does for
#: a dead JVM: SparkDriverDiedError from the Py4J error.
STAND_IN = """
import logging, sys
import barrierflow.ops.run
from barrierflow.cli.main import main
from barrierflow.errors import SparkDriverDiedError

PY4J = '''
import logging
try:
    raise ConnectionResetError(104, "Connection reset by peer")
except ConnectionResetError:
    logging.exception("Exception while sending command.")
'''


def run(*args, **kwargs):
    exec(compile(PY4J, "/site-packages/py4j/java_gateway.py", "exec"), {})
    try:
        raise RuntimeError("An error occurred while calling o209.isActive")
    except RuntimeError as exc:
        raise SparkDriverDiedError("the Spark driver JVM (pid 42, killed by SIGKILL) died") from exc


barrierflow.ops.run.run = run
sys.exit(main([*sys.argv[1:], "run", "spec.yaml", "--attempt-of-supervisor", "1"]))
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_the_tracebacks_show_with_verbose_only(tmp_path: Path, verbose: bool) -> None:
    done = subprocess.run([sys.executable, "-c", STAND_IN, *(["--verbose"] if verbose else [])], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert [line for line in lines if line.startswith("error:")] == [
        "error: the Spark driver JVM (pid 42, killed by SIGKILL) died"]
    assert lines[-1].startswith("error:")  # the error is the last word
    if verbose:
        assert "Exception while sending command." in done.stderr and "ConnectionResetError" in done.stderr
        assert "RuntimeError: An error occurred while calling o209.isActive" in done.stderr
        assert "The above exception was the direct cause" in done.stderr
    else:
        assert "Traceback" not in done.stderr and "Exception while sending command" not in done.stderr
