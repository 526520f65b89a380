"""One process per stage (``barrierflow run SPEC --processes``): the deployment shape.

The two-stage pipeline of tests/support/staged_specs.py (generator -> a -> channel ab
-> b -> Parquet through 2PC), every stage in a process (and Spark application) of its own and
the pipeline coordinator in the supervisor process:

1. SIGKILL of stage b's process after the first global checkpoint: the supervisor fails the
   run naming stage b and how it died, and kills stage a (no stage keeps writing as a dead
   attempt).
2. The next run restores the latest global checkpoint (attempt 1); SIGKILL of the supervisor
   (the pipeline coordinator) after a global checkpoint of that attempt: both stage processes
   notice their supervisor is gone and exit by themselves.
3. A run to the end of the source: exit 0 (the stop protocol: the final stage commits up to
   the last global checkpoint, every process exits), and the committed output holds every
   record exactly once.

The channel is on the embedded broker (``bootstrap: embedded``, issue 29): the supervisor runs
it with its data in ``<work_dir>/embedded-broker``, the killed supervisor takes it down
(parent-death signal: it saves its data), and every restart is the same command, restoring
from channel records that are still there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from barrierflow.checkpointing.global_manifest import GlobalManifest, global_key
from barrierflow.sinks.parquet import read_committed

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM, assert_sub_multiset
from tests.support.kafka_broker import KafkaEndpoint
from tests.support.staged_specs import PARTITIONS, two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(130)]
RECORDS = 400


def _supervisor(spec_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, **short_lived_driver_env()}
    return subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec_path), "--processes",
                             "--quiet", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition: Any, what: str, process: subprocess.Popen[str], timeout: float = 300.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail if ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the supervisor exited ({process.returncode}) before {what}:\n{out}\n{err[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {timeout:g} s")


def _globals_of_attempt(chk: Path, attempt: int) -> list[int]:
    found = []
    for path in chk.glob("global/chk-*/_metadata.json"):
        manifest = GlobalManifest.model_validate_json(path.read_text(encoding="utf-8"))
        if manifest.attempt == attempt:
            found.append(manifest.checkpoint_id)
    return sorted(found)


def _stage_pid(tmp_path: Path, stage: str) -> int:
    return int(json.loads((tmp_path / "work" / "stages" / stage / "_process_ready.json").read_text())["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {[p for p in pids if _alive(p)]} still run"
        time.sleep(0.2)


def _broker_pid(data: Path) -> int | None:
    """The pid of the embedded broker whose directory is ``data``, from its pid file."""
    try:
        return int(json.loads((data / "broker.pid").read_text(encoding="utf-8"))["broker"])
    except (OSError, ValueError, KeyError):
        return None


def _output(tmp_path: Path) -> list[tuple[int, int]]:
    table = read_committed(f"file://{tmp_path / 'out'}")
    if table is None:
        return []
    return sorted(zip(table.column("src_partition").to_pylist(), table.column("src_offset").to_pylist(), strict=True))


def test_one_process_per_stage_survives_a_killed_stage_and_a_killed_coordinator(
        tmp_path: Path, figures: dict[str, object]) -> None:
    data = two_stage_spec(tmp_path, KafkaEndpoint("unused", True))
    data["channels"][0]["bootstrap"] = "embedded"
    data["stages"][0]["sources"][0].update(records_per_partition=RECORDS, max_records_per_batch=20)
    data["spark"] = {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM}
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    chk = tmp_path / "chk"
    expected = [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]

    # 1. Kill stage b's process once the first global checkpoint completed.
    run = _supervisor(spec_path, "--until-exhausted")
    _wait_for(lambda: (chk / global_key(1, "_metadata")).is_file(), "the first global checkpoint", run)
    a, b = _stage_pid(tmp_path, "a"), _stage_pid(tmp_path, "b")
    assert a != b and run.pid not in (a, b)
    os.kill(b, signal.SIGKILL)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, f"{run.returncode}\n{out}\n{err[-3000:]}"
    assert "stage b of pipeline two exited before the run ended (killed by SIGKILL)" in err, err[-3000:]
    _wait_gone([a, b])
    assert_sub_multiset(_output(tmp_path), expected, "the kill of stage b")

    # 2. The next run restores (attempt 1); kill the supervisor after a global checkpoint of it.
    run = _supervisor(spec_path, "--until-exhausted")
    _wait_for(lambda: _globals_of_attempt(chk, 1), "a global checkpoint of attempt 1", run)
    a, b = _stage_pid(tmp_path, "a"), _stage_pid(tmp_path, "b")
    broker = _broker_pid(tmp_path / "work" / "embedded-broker")
    assert broker is not None and broker not in (run.pid, a, b)
    run.kill()
    run.communicate(timeout=60)
    _wait_gone([a, b])  # no stage outlives its pipeline coordinator
    _wait_gone([broker])  # nor the embedded broker (its data dir stays for the next run)
    assert_sub_multiset(_output(tmp_path), expected, "the kill of the supervisor")

    # 3. To the end: the stop protocol, exit 0, every record once.
    run = _supervisor(spec_path, "--until-exhausted", "--duration", "400")
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, f"{run.returncode}\n{out}\n{err[-3000:]}"
    assert "pipeline two (2 stages, attempt 2)" in out, out
    # The stage processes wrote their manifests under their supervisor's lease fence (3: one per run).
    fences = {stage: sorted(int(p.name.rsplit("-", 1)[1]) for p in (chk / "stages" / stage / "_writers").iterdir())
              for stage in ("a", "b")}
    assert all(found and found[-1] == 3 for found in fences.values()), fences
    rows = _output(tmp_path)
    figures.update({"rows": len(rows), "rows lost": len(set(expected) - set(rows)),
                    "rows duplicated": len(rows) - len(set(rows)),
                    "global checkpoints": len(list(chk.glob("global/chk-*/_metadata.json")))})
    assert rows == expected
