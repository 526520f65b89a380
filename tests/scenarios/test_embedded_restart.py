"""A multi-stage pipeline on the embedded broker is SIGKILLed and restarted with the same
command, repeatedly (issue 29): the embedded broker (noida-db) keeps the channels' records in
``<work_dir>/embedded-broker``, dies with the killed ``barrierflow run`` (parent-death
SIGTERM: it saves its data), and the next run restores the latest global checkpoint from
records that are still there. The final output holds every record exactly once.

The two-stage pipeline of tests/runtime/test_staged_pipeline.py (generator -> a -> channel ab
-> b -> Parquet through 2PC), all stages in the ``barrierflow run`` process.
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
from barrierflow.checkpointing.global_manifest import GlobalManifest
from barrierflow.testing.kafka_broker import KafkaEndpoint

from tests.drivers import short_lived_driver_env
from tests.runtime.test_stage_processes import _output, _wait_for
from tests.runtime.test_staged_pipeline import PARTITIONS, two_stage_spec
from tests.scenarios.harness import FAST_JVM, assert_sub_multiset

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(900), pytest.mark.slow(150)]
RECORDS = 400
KILLS = 2


def _run(spec_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, **short_lived_driver_env()}
    return subprocess.Popen([sys.executable, "-m", "barrierflow.cli.main", "run", str(spec_path), "--quiet",
                             "--until-exhausted", *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _globals(chk: Path) -> list[int]:
    return sorted(GlobalManifest.model_validate_json(p.read_text(encoding="utf-8")).checkpoint_id
                  for p in chk.glob("global/chk-*/_metadata.json"))


def _broker_pid(data: Path) -> int | None:
    try:
        return int(json.loads((data / "noida.control.json").read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # a zombie counts as gone
            if stat.read().split(") ")[1].split()[0] == "Z":
                return
        assert time.monotonic() < deadline, f"the embedded broker pid {pid} outlived the killed run"
        time.sleep(0.1)


def test_a_killed_pipeline_on_the_embedded_broker_restarts_with_the_same_command(
        tmp_path: Path, figures: dict[str, Any]) -> None:
    data = two_stage_spec(tmp_path, KafkaEndpoint("unused", True))
    data["channels"][0]["bootstrap"] = "embedded"
    data["stages"][0]["sources"][0].update(records_per_partition=RECORDS, max_records_per_batch=20)
    data["spark"] = {"master": "local[1]", "shuffle_partitions": 1, "conf": FAST_JVM}
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    chk, broker_data = tmp_path / "chk", tmp_path / "work" / "embedded-broker" / "data"
    expected = [(p, o) for p in range(PARTITIONS) for o in range(RECORDS)]
    killed_after = []

    for kill in range(KILLS):
        before = len(_globals(chk))
        run = _run(spec_path)
        _wait_for(lambda before=before: len(_globals(chk)) > before, f"a global checkpoint of run {kill + 1}", run)
        broker = _broker_pid(broker_data)
        assert broker is not None and broker != run.pid
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
        _wait_gone(broker)  # the parent-death signal stopped it
        killed_after.append(len(_globals(chk)))
        assert_sub_multiset(_output(tmp_path), expected, f"kill {kill + 1}")

    run = _run(spec_path, "--duration", "400")
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, f"{run.returncode}\n{out}\n{err[-3000:]}"
    assert f"pipeline two (2 stages, attempt {KILLS})" in out, out
    output = _output(tmp_path)
    figures.update({"kills": KILLS, "global checkpoints when killed": killed_after,
                    "rows committed": len(output), "rows expected": len(expected)})
    assert output == expected
