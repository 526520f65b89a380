"""Shared fixtures: one local SparkSession per test session (per xdist worker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from barrierflow.kafka_io.embedded_broker import JAVA_OPTIONS_ENV

from tests.drivers import JVM_ARCHIVE_ROOT, WORKER_PYTHON, driver_archive
from tests.support.jvm_archive import FAST_JVM_OPTIONS
from tests.support.kafka_broker import TEST_JVM_OPTIONS

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_kafka", "tests.fixtures_postgres",
                  "tests.support.cpu_accounting"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The embedded brokers the tests' pipelines start (in this process or a driver's) live seconds:
# C1 only, as the suite's own broker (measured: 5-10 core-seconds per start with C2 compiling).
os.environ.setdefault(JAVA_OPTIONS_ENV, " ".join(TEST_JVM_OPTIONS))

_archive_builder: subprocess.Popen[bytes] | None = None
#: The repository root, where ``tests`` (and ``tests.support``) is importable.
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process (not an xdist worker) starts writing the driver class archive
    in the background; short-lived test drivers map it once it exists (never waiting)."""
    global _archive_builder
    if os.environ.get("PYTEST_XDIST_WORKER") or driver_archive().is_file():
        return
    JVM_ARCHIVE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(JVM_ARCHIVE_ROOT / "build.log", "wb") as log:
        _archive_builder = subprocess.Popen([sys.executable, "-m", "tests.support.jvm_archive",
                                             str(JVM_ARCHIVE_ROOT)], stdout=log, stderr=subprocess.STDOUT,
                                            cwd=PROJECT_ROOT, start_new_session=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A builder still running when the suite ends is stopped with its driver."""
    if _archive_builder is not None and _archive_builder.poll() is None:
        os.killpg(_archive_builder.pid, signal.SIGKILL)
        _archive_builder.wait(timeout=30)


#: The suite's session runs hundreds of small queries for half an hour, none of them long enough
#: for C2's code to pay for its compiling: C1 only and the serial GC, as the short-lived drivers.
#: Measured in a fresh-clone run: C2's compiler threads were 40 % of each shared session's CPU
#: (65-69 of 165-169 core-seconds by minute 25), G1's threads 16 more.
#: C1's code cache is 48 MB by default: a fresh-clone run found each shared session's at 46.7 and
#: 47.6 MB 18 minutes in, where the sweeper flushes compiled code that is then compiled again.
#: The sessions that live the whole run get room for all of it (the short-lived drivers never
#: fill 48 MB).
SHARED_SESSION_JVM_OPTIONS = f"{FAST_JVM_OPTIONS} -XX:ReservedCodeCacheSize=128m"
SHARED_SESSION_CONF = {"spark.driver.extraJavaOptions": SHARED_SESSION_JVM_OPTIONS}


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one SparkSession of this test process (local[2], 4 shuffle partitions), with Spark's
    Kafka connector on its class path (``reader: spark`` sources; installed by ``make install``)."""
    from barrierflow.runtime.session import build_session
    from barrierflow.spec.models import SparkSpec

    # Its Python workers run through barrierflow's worker launcher, as the short-lived drivers' do:
    # pyspark imported from site-packages (compiled once), not from Spark's zip (compiled in every
    # worker process). PySpark reads PYSPARK_PYTHON when the session starts; the variable is put
    # back for what this process starts later. Measured on the 150 tests of checkpointing,
    # verification and state (one worker): 354 against 375 core-seconds.
    os.environ.setdefault("BARRIERFLOW_WORKER_PYTHON", sys.executable)
    given = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = str(WORKER_PYTHON)
    try:
        session = build_session(SparkSpec(master="local[2]", shuffle_partitions=4, conf=SHARED_SESSION_CONF),
                                app_name="barrierflow-tests", jvm_sets=["spark-kafka"])
    finally:
        if given is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = given
    yield session
    session.stop()


#: Fixtures that start (or hold) Spark, Kafka, PostgreSQL or Airflow: a test that uses one of
#: them, directly or through another fixture, is marked ``services`` (not in ``make test-quick``).
SERVICE_FIXTURES = frozenset({"spark", "kafka_endpoint", "secured_kafka_endpoint", "postgres_endpoint",
                              "airflow_home", "airflow_db"})
#: The markers tests set for those services themselves (see pyproject.toml).
SERVICE_MARKERS = ("spark", "kafka", "postgres")
#: Names a test module uses when its tests start those services without a fixture: Spark
#: drivers (the short-lived drivers' options, their JVM flags), brokers, servers and clusters.
SERVICE_NAMES = frozenset({"short_lived_driver_env", "short_lived_driver_java_options", "FAST_JVM", "WORKER_PYTHON",
                           "embedded_kafka", "embedded_broker", "KafkaBroker", "start_broker", "throwaway_postgres",
                           "spark_cluster", "airflow_server", "build_session", "run_bounded"})


def _starts_services(item: pytest.Item) -> bool:
    """Whether ``item`` starts Spark, Kafka, PostgreSQL or Airflow (or launches a driver that
    does): by its markers, the fixtures it uses (transitively) and the names its module uses."""
    if any(item.get_closest_marker(name) for name in SERVICE_MARKERS):
        return True
    if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    return module is not None and not SERVICE_NAMES.isdisjoint(vars(module))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test that starts a service ``services`` (:func:`_starts_services`;
    ``make test-quick`` runs ``-m "not services"``), then orders the longest tests first: tests
    marked ``slow(seconds)`` run before all others, longest first, so the two xdist workers
    finish together instead of one of them starting a three-minute test while the other has
    nothing left (the order of the rest is kept)."""
    for item in items:
        if _starts_services(item):
            item.add_marker(pytest.mark.services)

    def expected_seconds(item: pytest.Item) -> float:
        marker = item.get_closest_marker("slow")
        return float(marker.args[0]) if marker and marker.args else 0.0

    items.sort(key=expected_seconds, reverse=True)  # stable: unmarked tests keep their order


#: Variables that code under test sets in this process for good (the DAG tasks'
#: ``os.environ.setdefault("BARRIERFLOW_HOME", ...)``, right in a task process of their own):
#: under ``dag.test()`` they would outlive the test and point later tests' specs elsewhere.
_PROCESS_WIDE_VARIABLES = ("BARRIERFLOW_HOME",)


@pytest.fixture(autouse=True)
def _restore_process_wide_variables() -> Iterator[None]:
    """Each test leaves the variables in :data:`_PROCESS_WIDE_VARIABLES` as it found them."""
    before = {name: os.environ.get(name) for name in _PROCESS_WIDE_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> dict[str, object]:
    """Figures a test measured (outage tests: failed checkpoints, recovery time, rows lost):
    filled in by the test, printed in the terminal summary (also from xdist workers)."""
    measured: dict[str, object] = {}
    request.node.user_properties.append(("figures", measured))
    return measured


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print every test's ``figures`` (see the fixture) under one heading."""
    lines = []
    for report in terminalreporter.getreports("passed") + terminalreporter.getreports("failed"):
        if report.when != "call":
            continue
        for name, value in report.user_properties:
            if name == "figures" and value:
                shown = ", ".join(f"{k} {v}" for k, v in value.items())
                lines.append(f"{report.nodeid}: {shown}")
    if lines:
        terminalreporter.section("figures measured by tests")
        for line in lines:
            terminalreporter.write_line(line)
