"""Options for the short-lived Spark drivers the tests start (crash runs, CLI runs, spark-submit)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from barrierflow.spark.session import WORKER_PYTHON, WORKER_PYTHON_ENV

from tests.support.jvm_archive import archive_path, java_options

#: Where the suite keeps its class-data-sharing archive of the Spark driver (git-ignored).
JVM_ARCHIVE_ROOT = Path(__file__).resolve().parents[1] / "var" / "jvm-archive"


@functools.cache
def driver_archive() -> Path:
    """The suite's archive path for this JDK and these Spark jars (it may not exist yet)."""
    return archive_path(JVM_ARCHIVE_ROOT)


def short_lived_driver_java_options() -> str:
    """``_JAVA_OPTIONS`` for a driver a test starts and stops (or kills) soon: C1 only, the
    serial GC, and the suite's class archive once it is written (started by tests/conftest.py)."""
    return java_options(driver_archive())


def short_lived_driver_env() -> dict[str, str]:
    """Environment variables for a driver a test starts and stops (or kills) soon, on top of the
    test's own: its JVM options (:func:`short_lived_driver_java_options`) and, as its workers'
    Python (``PYSPARK_PYTHON``), this interpreter started through ``WORKER_PYTHON``
    (barrierflow's launcher of a local driver's workers, given here whatever the driver's
    master), which imports pyspark from site-packages instead of recompiling it from Spark's
    zip in every worker process (measured: 1.1-3.2 core-seconds less per crashed driver of the
    crash tests). The driver itself runs whatever Python the test starts it with."""
    return {"PYSPARK_PYTHON": str(WORKER_PYTHON), WORKER_PYTHON_ENV: sys.executable,
            "_JAVA_OPTIONS": short_lived_driver_java_options()}
