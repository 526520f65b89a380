"""The suite's class-data-sharing archive is one a short-lived test driver's JVM really maps.

A driver JVM that cannot map the archive loads its classes from the jars as usual and only warns,
so a broken archive costs every test driver of the suite its start time without failing anything
(an archive holding the 43 classes of ``spark-submit``'s launcher JVM did, for a while). This
test starts one driver the way the tests start theirs and reads its class-loading log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.drivers import driver_archive, short_lived_driver_env
from tests.support.jvm_archive import MIN_ARCHIVED_CLASSES, archived_classes, build_archive

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

_DRIVER = """
from pyspark.sql import SparkSession
session = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
assert session.range(3).count() == 3
session.stop()
"""


def test_a_short_lived_driver_maps_the_suites_archive(tmp_path: Path) -> None:
    archive = build_archive(driver_archive())
    assert archive is not None, "the warm-up driver wrote no archive (see the log's warning)"
    logs = tmp_path / "class-load"
    logs.mkdir()
    env = {**os.environ, **short_lived_driver_env()}
    env["_JAVA_OPTIONS"] += f" -Xlog:class+load=info:file={logs}/%p.log"
    run = subprocess.run([sys.executable, "-c", _DRIVER], env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    # Two JVMs log: spark-submit's launcher (another class path, so it cannot map the archive) and
    # the driver, which loads thousands of classes, nearly all from the archive's top layer.
    from_archive = {log.name: log.read_text(encoding="utf-8", errors="replace").count("shared objects file (top)")
                    for log in logs.iterdir()}
    assert max(from_archive.values()) > MIN_ARCHIVED_CLASSES, from_archive


def test_a_dump_counts_only_when_its_log_shows_it_finished(tmp_path: Path) -> None:
    finished = tmp_path / "finished.log"
    finished.write_text("[1.0s][info][cds] Number of classes 14398\n"
                        "[9.0s][info][cds] Shared file region (bm )  2:  2526008 bytes\n", encoding="utf-8")
    killed = tmp_path / "killed.log"
    killed.write_text("[1.0s][info][cds] Number of classes 14398\n", encoding="utf-8")
    assert archived_classes(finished) == 14398
    assert archived_classes(killed) == 0
    assert archived_classes(tmp_path / "absent.log") == 0
