"""Shared fixtures: one local SparkSession per test session (per xdist worker)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_kafka", "tests.fixtures_postgres"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one SparkSession of this test process (local[2], 4 shuffle partitions)."""
    from barrierflow.runtime.session import build_session
    from barrierflow.spec.models import SparkSpec

    session = build_session(SparkSpec(master="local[2]", shuffle_partitions=4), app_name="barrierflow-tests")
    yield session
    session.stop()
