"""Options for the short-lived Spark drivers the tests start (crash runs, CLI runs, spark-submit)."""

from __future__ import annotations

import functools
from pathlib import Path

from barrierflow.testing.jvm_archive import archive_path, java_options

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
