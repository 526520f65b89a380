"""The driver JVM barrierflow launches (barrierflow.spark.session.launching_jvm): a killed driver
takes it with it at once, and it does not look up Python data sources.

The regression: a driver SIGKILLed right after a global checkpoint left its JVM running for a
moment; that JVM's streaming queries planned one more batch and wrote ``offsets/<V>`` into a
stage's Spark checkpoint directory after the next run had restored it, and the restored query
stopped with "Previous batch N not found in offset log" (bench/results/history.md, the cycle
pipeline's restore test). The JVM is frozen (SIGSTOP) before the driver is killed, so it cannot
notice the EOF on its stdin and exit on its own: only the kernel's parent-death signal ends it,
and without that the test fails every time, not only when a batch happens to be planned in the
window.

Spark 4 starts a Python worker daemon at a driver's first data source lookup to find and
register the data sources of installed ``pyspark_*`` packages; barrierflow registers its own,
so its JVMs skip that (0.7 core-seconds per driver start).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from barrierflow.spark.session import NO_PYTHON_DATA_SOURCE_LOOKUP

from tests.drivers import short_lived_driver_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300), pytest.mark.slow(15)]

DRIVER = """
import time
from barrierflow.spark.session import build_session
from barrierflow.spec.models import SparkSpec

session = build_session(SparkSpec(master="local[1]", shuffle_partitions=1), app_name="jvm-dies-with-driver")
print(session._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
time.sleep(600)
"""


def _state(pid: int, started: str | None = None) -> tuple[str, str] | None:
    """(state letter, start time) of ``pid`` from /proc, or None once it is gone or reaped (or
    the pid now names another process than the one started at ``started``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, start = fields[0], fields[19]
    if started is not None and start != started:
        return None
    return state, start


def _alive(pid: int, started: str) -> bool:
    state = _state(pid, started)
    return state is not None and state[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_spark_jvm_of_a_sigkilled_driver_is_killed_with_it() -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env={**os.environ, **short_lived_driver_env()})
    jvm: int | None = None
    started = ""
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline()
        assert line.strip().isdigit(), f"the driver did not report its JVM's pid (exit {driver.poll()})"
        jvm = int(line)
        state = _state(jvm)
        assert state is not None
        started = state[1]
        os.kill(jvm, signal.SIGSTOP)  # frozen: it cannot exit on its own when its stdin closes
        driver.kill()
        assert driver.wait(timeout=60) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _alive(jvm, started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(jvm, started), (
            f"the JVM (pid {jvm}) of the SIGKILLed driver still exists 10 s later: it can go on writing "
            "the streaming queries' offset logs after the next run restored them")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if jvm is not None and _alive(jvm, started):
            os.kill(jvm, signal.SIGKILL)  # SIGKILL ends a stopped process too


#: A driver that feeds PySpark's accumulator server (the JVM connects to it when the first
#: Python task's accumulator updates arrive) and then exits normally, as ``barrierflow run``
#: does after its summary.
ACCUMULATING_DRIVER = """
from barrierflow.spark.session import build_session
from barrierflow.spec.models import SparkSpec

session = build_session(SparkSpec(master="local[1]", shuffle_partitions=1), app_name="driver-exits-cleanly")
seen = session.sparkContext.accumulator(0)
session.sparkContext.parallelize(range(4), 2).foreach(lambda _: seen.add(1))
print(seen.value, flush=True)
"""


def test_a_driver_that_exits_normally_prints_no_traceback() -> None:
    """At a normal exit the driver stops its SparkContext before its JVM goes: PySpark's
    accumulator server stops serving the JVM's connection first, so the connection closing
    when the JVM exits is no ``EOFError`` traceback printed after the run's summary."""
    done = subprocess.run([sys.executable, "-c", ACCUMULATING_DRIVER], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **short_lived_driver_env()}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "4\n"
    for trace in ("Traceback", "EOFError", "Error"):
        assert trace not in done.stderr, done.stderr[-3000:]


def _descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (pid -> command line), from /proc."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, str] = {}
    pending = list(children.get(pid, []))
    while pending:
        child = pending.pop()
        found[child] = commands.get(child, "")
        pending += children.get(child, [])
    return found


def test_the_driver_jvm_does_not_look_up_python_data_sources(spark: object, tmp_path: Path) -> None:
    """The suite's session is built as every driver's is (``build_session``): after a read by
    format name (which makes Spark look up Python data sources), no Python worker of Spark's
    lookup runs under its JVM, the JVM's ``PYSPARK_DRIVER_PYTHON`` is the name that turns the
    lookup off, and this process's own is untouched."""
    spark.range(3).write.parquet(str(tmp_path / "t"))  # type: ignore[attr-defined]
    assert spark.read.format("parquet").load(str(tmp_path / "t")).count() == 3  # type: ignore[attr-defined]
    jvm = spark._jvm  # type: ignore[attr-defined]
    assert jvm.java.lang.System.getenv("PYSPARK_DRIVER_PYTHON") == NO_PYTHON_DATA_SOURCE_LOOKUP
    assert os.environ.get("PYSPARK_DRIVER_PYTHON") != NO_PYTHON_DATA_SOURCE_LOOKUP
    lookups = {pid: command for pid, command in _descendants(jvm.java.lang.ProcessHandle.current().pid()).items()
               if "lookup_data_sources" in command}
    assert lookups == {}, f"Spark looked up Python data sources: {lookups}"


#: A spark-submit application: after it registers a Python data source and reads it by name (what
#: makes Spark look up the installed ones, as barrierflow's jobs register theirs), its JVM's
#: PYSPARK_DRIVER_PYTHON and the Python workers of Spark's lookup under the JVM (none expected).
SUBMITTED_APP = """
import json, sys
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader

sys.path.insert(0, {tests_root!r})
from tests.spark.test_driver_jvm import _descendants

class Tiny(DataSource):
    @classmethod
    def name(cls):
        return "tiny_source"

    def schema(self):
        return "x INT"

    def reader(self, schema):
        return TinyReader()

class TinyReader(DataSourceReader):
    def read(self, partition):
        yield (1,)

session = SparkSession.builder.getOrCreate()
session.dataSource.register(Tiny)
assert session.read.format("tiny_source").load().count() == 1
jvm = session._jvm
lookups = [c for c in _descendants(jvm.java.lang.ProcessHandle.current().pid()).values() if "lookup_data_sources" in c]
print(json.dumps({{"env": jvm.java.lang.System.getenv("PYSPARK_DRIVER_PYTHON"), "python": sys.executable,
                  "lookups": lookups}}), flush=True)
session.stop()
"""


def test_a_driver_that_airflow_submits_does_not_look_up_python_data_sources(tmp_path: Path) -> None:
    """The launch and batch operators' spark-submit (client mode, a local master, the DAGs'
    environment: PYSPARK_PYTHON only) runs its Python driver with the Python spark-submit would
    have chosen, and its JVM without the lookup."""
    from types import SimpleNamespace

    import pyspark
    from barrierflow.airflow.launch import skip_python_data_source_lookup

    hook = SimpleNamespace(_is_yarn=False, _is_kubernetes=False, _connection={"deploy_mode": None},
                           _conf={"spark.sql.shuffle.partitions": "1"}, _env_vars={"PYSPARK_PYTHON": sys.executable})
    skip_python_data_source_lookup(hook)  # type: ignore[arg-type]
    app = tmp_path / "app.py"
    app.write_text(SUBMITTED_APP.format(tests_root=str(Path(__file__).resolve().parents[2])), encoding="utf-8")
    confs = [arg for key, value in hook._conf.items() for arg in ("--conf", f"{key}={value}")]
    assert hook._env_vars["SPARK_HOME"] == str(Path(pyspark.__file__).parent)  # what find-spark-home gives
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    env.update({**short_lived_driver_env(), **hook._env_vars})
    submit = Path(sys.executable).with_name("spark-submit")
    done = subprocess.run([str(submit), "--master", "local[1]", *confs, str(app)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"env": NO_PYTHON_DATA_SOURCE_LOOKUP, "python": sys.executable, "lookups": []}, seen


def test_the_lookup_is_left_alone_where_the_environment_is_not_spark_submits() -> None:
    """On YARN and Kubernetes the provider turns the environment into the driver's settings, and in
    cluster mode the conf reaches a driver on another host: nothing is changed there. A Python the
    submit names itself is kept."""
    from types import SimpleNamespace

    from barrierflow.airflow.launch import skip_python_data_source_lookup

    for flags in ({"_is_yarn": True, "_is_kubernetes": False, "_connection": {"deploy_mode": None}},
                  {"_is_yarn": False, "_is_kubernetes": True, "_connection": {"deploy_mode": "client"}},
                  {"_is_yarn": False, "_is_kubernetes": False, "_connection": {"deploy_mode": "cluster"}}):
        hook = SimpleNamespace(**flags, _conf={}, _env_vars={"PYSPARK_PYTHON": "/opt/py/bin/python"})
        skip_python_data_source_lookup(hook)  # type: ignore[arg-type]
        assert (hook._conf, hook._env_vars) == ({}, {"PYSPARK_PYTHON": "/opt/py/bin/python"}), flags
    # another Python than this one could find another Spark: left alone unless SPARK_HOME says which
    mine = {"_is_yarn": False, "_is_kubernetes": False, "_connection": {"deploy_mode": None},
            "_conf": {"spark.pyspark.python": "/opt/mine/bin/python"}}
    hook = SimpleNamespace(**mine, _env_vars={"PYSPARK_PYTHON": "x"})
    skip_python_data_source_lookup(hook)  # type: ignore[arg-type]
    assert (hook._conf, hook._env_vars) == (mine["_conf"], {"PYSPARK_PYTHON": "x"})
    hook = SimpleNamespace(**mine, _env_vars={"PYSPARK_PYTHON": "x", "SPARK_HOME": "/opt/spark"})
    skip_python_data_source_lookup(hook)  # type: ignore[arg-type]
    assert hook._conf["spark.pyspark.driver.python"] == "/opt/mine/bin/python"
    assert hook._env_vars == {"PYSPARK_PYTHON": "x", "SPARK_HOME": "/opt/spark",
                              "PYSPARK_DRIVER_PYTHON": NO_PYTHON_DATA_SOURCE_LOOKUP}
