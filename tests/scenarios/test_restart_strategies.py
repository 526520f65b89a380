"""A pipeline under its restart strategy (``barrierflow run`` as the supervisor of its driver):
the driver SIGKILLed twice at random comes back by itself each time (after a doubled delay), the
third failure stops it, and the output equals the failure-free output exactly; a failure-rate strategy of one
failure stops at the second with exit 1 and says
why and what it did."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.lease import lease_holder
from barrierflow.pipeline.model import open_pipeline
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec import load_spec

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import assert_sub_multiset, finish, window_rows, windowed_spec

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
#: Records per partition: 30 micro-batches of 100, more than three short driver lives use up.
RECORDS = 3000
PER_BATCH = 100
EVENT_TIME_STEP_MS = 10
# The failure-free reference does not depend on the batch size (windows close by event time):
# it is computed in batches of 400 (8 in-process batches, not 30), the same reference as
# tests/scenarios/test_random_crashes.py's (one computation when both run in one worker).
#: Longest wait for a driver to complete its next checkpoint (a loaded 2-core machine).
CHECKPOINT_WAIT = 240.0


def _spec(tmp_path: Path, restart: dict[str, Any]) -> tuple[Path, Path]:
    out = tmp_path / "out"
    path = windowed_spec(tmp_path, {"name": "out", "type": "parquet", "path": f"file://{out}"}, records=RECORDS,
                         per_batch=PER_BATCH, event_time_step_ms=EVENT_TIME_STEP_MS)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["restart"] = restart
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path, out


def _supervisor(spec_path: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    environment = {**os.environ, **(env or {}), **short_lived_driver_env()}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec_path),
                                 "--until-exhausted", "--quiet"], stdout=out, stderr=subprocess.STDOUT,
                                env=environment)


def _newest_checkpoint(store: CheckpointStore) -> int:
    latest = store.latest()
    return latest.checkpoint_id if latest is not None else 0


def _kill_driver_after_checkpoint(spec_path: Path, supervisor: subprocess.Popen[bytes], after: int, log: Path,
                                  *, kill_after: float = 0.0) -> int:
    """Once a checkpoint newer than ``after`` completed, SIGKILL the driver that holds the
    pipeline's lease (the supervisor's child) ``kill_after`` seconds later (the random moment of
    a kill, not a wait for readiness); returns that checkpoint's id."""
    pipeline = open_pipeline(spec_path)
    store = CheckpointStore.for_spec(load_spec(spec_path))
    deadline = time.monotonic() + CHECKPOINT_WAIT
    while time.monotonic() < deadline:
        assert supervisor.poll() is None, f"the supervised run ended ({supervisor.returncode}):\n{log.read_text()}"
        newest = _newest_checkpoint(store)
        holder = lease_holder(Path(pipeline.work_dir), pipeline.objects)
        if newest > after and holder is not None:
            driver = int(holder["pid"])  # type: ignore[call-overload]
            assert driver != supervisor.pid, "the supervisor itself holds the lease: it must only supervise"
            time.sleep(kill_after)
            os.kill(driver, signal.SIGKILL)
            return newest
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint after {after} within {CHECKPOINT_WAIT:g} s:\n{log.read_text()}")


@pytest.mark.slow(90)
def test_exponential_delay_brings_a_driver_killed_twice_back_and_the_third_failure_stops_it(
        spark: Any, tmp_path: Path, reference_rows: Callable[..., list[tuple[Any, ...]]]) -> None:
    """The driver is SIGKILLed at random moments (a random part of a second after each attempt's
    first checkpoint): the strategy brings it back twice, the third failure within
    the reset threshold stops the run with exit 1 naming what the strategy did; the output holds
    no row twice, and the next run ends with exactly the failure-free output."""
    reference = reference_rows(RECORDS, EVENT_TIME_STEP_MS)
    spec_path, out = _spec(tmp_path, {"type": "exponential-delay", "initial_backoff": "200ms",
                                      "max_backoff": "1s", "backoff_multiplier": 2, "jitter_factor": 0,
                                      "reset_backoff_threshold": "1h", "attempts_before_reset_backoff": 2})
    rng = random.Random(20261127)
    log = tmp_path / "supervisor.log"
    supervisor = _supervisor(spec_path, log)
    try:
        after = 0
        for _ in range(3):
            after = _kill_driver_after_checkpoint(spec_path, supervisor, after, log,
                                                  kill_after=rng.uniform(0.0, 0.8))
        code = supervisor.wait(timeout=CHECKPOINT_WAIT)
    finally:
        supervisor.kill()
    text = log.read_text()
    assert code == 1, text
    for attempt, delay in ((1, "0.2"), (2, "0.4")):
        assert f"restart {attempt} of 2 after {delay} s (strategy exponential-delay)" in text, text
    assert "restart 3 of" not in text, text
    for attempt in range(1, 4):
        assert f"attempt {attempt} failed: the run (pid" in text, text
    assert "attempt 4" not in text and "was killed by SIGKILL. Restart strategy exponential-delay" in text, text
    assert "stopped after 3 attempt(s)" in text and "at most 2 attempts before a reset" in text, text
    assert "restarted the job 2 time(s), after 0.2 s, 0.4 s" in text, text
    table = read_committed(f"file://{out}")
    assert_sub_multiset(window_rows(table.to_pylist() if table is not None else []), reference,
                        "three kills, two restarts")
    finish(spark, spec_path)  # the job an operator starts again: it ends with the exact output
    table = read_committed(f"file://{out}")
    assert window_rows(table.to_pylist() if table is not None else []) == reference


@pytest.mark.slow(15)
def test_failure_rate_of_one_stops_at_the_second_failure_with_exit_1(
        tmp_path: Path, reference_rows: Callable[..., list[tuple[Any, ...]]]) -> None:
    reference = reference_rows(RECORDS, EVENT_TIME_STEP_MS)
    spec_path, out = _spec(tmp_path, {"type": "failure-rate", "max_failures_per_interval": 1,
                                      "failure_rate_interval": "10 minutes", "delay": "0s"})
    log = tmp_path / "supervisor.log"
    # Every attempt SIGKILLs itself once its first checkpoint is complete (sinks not yet told).
    supervisor = _supervisor(spec_path, log, {"BARRIERFLOW_CRASH_AT": "after_manifest@1"})
    try:
        code = supervisor.wait(timeout=CHECKPOINT_WAIT * 2)
    finally:
        supervisor.kill()
    text = log.read_text()
    assert code == 1, text
    assert text.count("injected crash at after_manifest") == 2, text
    assert "restart 1 of 1 per 600 s after 0.0 s (strategy failure-rate)" in text, text
    assert "error: pipeline " in text and "stopped after 2 attempt(s)" in text, text
    assert "killed by SIGKILL" in text and "failure-rate: at most 1 failures per 600 s" in text, text
    assert "restarted the job 1 time(s), after 0.0 s" in text, text
    table = read_committed(f"file://{out}")
    assert_sub_multiset(window_rows(table.to_pylist() if table is not None else []), reference,
                        "two failures the strategy stopped at")
