"""A cluster whose executors do not see the driver's work dir: the run stops before its first
batch with exit 2, naming the work dir, the hosts and the fix (``barrierflow.spark.cluster``).

One host cannot have two machines' disks, so the worker gets a file system view of its own: it
starts in a new mount namespace (``unshare -m``) with an empty tmpfs over the test's folder,
which holds the spec's work dir. The driver (spark-submit here) writes its probe file into the
real folder; the executors, inside the worker's namespace, look at the tmpfs and do not find it:
what happens when the work dir is a local disk on the driver's machine of a real cluster.
Skipped where mount namespaces are not allowed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.drivers import short_lived_driver_java_options
from tests.support.spark_cluster import hiding_wrapper, running_standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow(15), pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def _hiding_wrapper(folder: Path) -> list[str]:
    """The worker's command prefix hiding ``folder``; skips the test where it cannot work."""
    wrapper, why = hiding_wrapper(folder)
    if not wrapper:
        pytest.skip(why)
    return wrapper


def test_executors_that_do_not_see_the_work_dir_stop_the_run_naming_it(tmp_path: Path) -> None:
    shared = tmp_path / "driver-disk"
    shared.mkdir()
    wrapper = _hiding_wrapper(shared)
    work_dir = shared / "work"
    with running_standalone_cluster(tmp_path / "spark", cores=1, memory="512m", worker_wrapper=wrapper,
                                    worker_env={"PYSPARK_PYTHON": sys.executable}) as cluster:
        spec = {
            "name": f"unshared{uuid.uuid4().hex[:8]}", "work_dir": str(work_dir),
            "sources": [{"name": "events", "type": "generator", "partitions": 1, "rows_per_second": 0,
                         "records_per_partition": 100}],
            "transformation": {"function": "barrierflow.transforms.projection:project",
                               "options": {"columns": {"key": "key"}}},
            "sinks": [{"type": "discard"}],
            "checkpoint": {"storage": f"file://{shared / 'checkpoints'}", "interval": "1s"},
            "spark": {"master": cluster.master_url, "shuffle_partitions": 1},
        }
        spec_path = tmp_path / "pipeline.yaml"
        spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1", "_JAVA_OPTIONS": short_lived_driver_java_options()}
        for name in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "BARRIERFLOW_CRASH_AT"):
            env.pop(name, None)
        command = cluster.submit_command(ROOT / "jobs" / "run_pipeline.py", "--spec", str(spec_path),
                                         "--until-exhausted", conf={"spark.cores.max": "1"})
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        try:
            out, err = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    # spark-submit exits with the driver's code; the driver's stderr is merged into its stdout.
    assert process.returncode == 2, out[-3000:] + err[-3000:]
    assert f"do not see the work dir {work_dir} of this driver" in out, out[-3000:]
    assert "Mount one file system at that same path" in out
    assert not (work_dir / "spark-checkpoint" / "offsets").exists(), "a batch was planned before the check"
    assert not list(work_dir.glob(".executor-probe-*")), "the probe file was left behind"
