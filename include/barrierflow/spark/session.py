"""Building the SparkSession barrierflow runs in (jobs, deep verification).

Registering barrierflow's data sources on it is the runtime's business
(:func:`barrierflow.runtime.session.register_data_sources`): this module knows Spark, not the
sources and sinks above it."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from barrierflow.processes import temporary_environment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from barrierflow.spec.models import SparkSpec

log = logging.getLogger(__name__)

PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
#: The state store provider class of each ``spark.state_store`` value.
PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}

#: Settings every barrierflow job needs, whatever the spec says.
REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # Keep enough state versions locally that a snapshot's files outlive its async upload.
    "spark.sql.streaming.minBatchesToRetain": "100",
    # Spark's own checkpoint (offset and commit logs, state store files) is always on the
    # work dir's local disk. Its default manager goes through Hadoop's FileContext, which on a
    # local disk without Hadoop's native library forks `chmod` for every file created and
    # `readlink` for every rename (a process per state file per micro-batch). The FileSystem
    # manager writes the same files (temp file, then rename) without those processes:
    # commitOffsets + walCommit of a two-stage channel pipeline fell from 6.1 s to 2.2 s per
    # 3,000,000 rows.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def shuffle_partitions(spec: SparkSpec) -> str:
    """The shuffle partitions a session built from ``spec`` has (:func:`build_session`):
    ``spark.conf``'s ``spark.sql.shuffle.partitions`` if it sets one, else ``shuffle_partitions``."""
    return str(spec.conf.get(SHUFFLE_PARTITIONS, spec.shuffle_partitions))


def build_session(spec: SparkSpec, app_name: str = "barrierflow", *, jars: Sequence[str] = (),
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """Return a SparkSession configured for barrierflow (creating or reusing one), with the
    spec's ``py_packages`` shipped to its driver and executors (:mod:`barrierflow.spark.user_code`).
    ``jars`` (local paths: a JVM artifact set of :mod:`barrierflow.jvm`, such as Spark's Kafka
    connector) go onto the driver's class path and to the executors (``spark.jars``) when this
    call starts the JVM; a session that exists already keeps its class path (a source that needs
    the jars then names the fix when it is read). ``conf`` is barrierflow's own configuration
    for the session (S3A for a work dir on object storage, :mod:`barrierflow.spark.s3a`); the
    spec's ``spark.conf`` wins over it. A local driver that starts its JVM here runs its Python
    workers through :data:`WORKER_PYTHON` unless the user chose their Python (:func:`python_worker_env`).

    Raises:
        UserInputError: an entry of ``spark.py_packages`` is not a package directory.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # A JVM this call starts (none runs yet) gets the launcher of a local driver's workers, if it applies.
    settings = {**(conf or {}), **spec.conf}
    workers = {} if SparkContext._gateway is not None else python_worker_env(
        settings.get("spark.master", spec.master), os.environ, settings)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Started by us, not by spark-submit: the spec chooses the master and, for local
        # masters, the driver binds to loopback only. Under spark-submit its --master wins.
        builder = builder.master(spec.master)
        if spec.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    builder = (
        builder.config(SHUFFLE_PARTITIONS, str(spec.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in {**(conf or {}), **spec.conf, **REQUIRED_CONF, **state_store_conf(spec)}.items():
        builder = builder.config(key, value)
    if jars:
        given = [j for j in spec.conf.get("spark.jars", "").split(",") if j]
        builder = builder.config("spark.jars", ",".join([*given, *(j for j in jars if j not in given)]))
    # PySpark reads PYSPARK_PYTHON when the SparkContext starts, and the JVM it launches keeps the
    # environment it started with; what this process starts later does not inherit the settings.
    with launching_jvm(), temporary_environment(workers):
        session = builder.getOrCreate()
    _log_accumulator_disconnects()
    session.sparkContext.setLogLevel("ERROR")
    apply_state_store(session, spec)
    if spec.py_packages:
        from barrierflow.spark.user_code import ship_py_packages

        ship_py_packages(session, spec.py_packages)
    return session


#: The launcher of the Python workers of a local driver (see the script and :func:`python_worker_env`).
WORKER_PYTHON = Path(__file__).resolve().with_name("worker_python.sh")
#: The variable that tells :data:`WORKER_PYTHON` which Python to run.
WORKER_PYTHON_ENV = "BARRIERFLOW_WORKER_PYTHON"


def python_worker_env(master: str, environ: Mapping[str, str], conf: Mapping[str, str], *,
                      pyspark_home: Path | None = None) -> dict[str, str]:
    """The environment a driver that starts its own JVM with ``master`` (see
    :func:`build_session`) starts it with so that its Spark workers' Python (the worker daemon,
    the streaming source runner, data source workers) imports pyspark from site-packages
    instead of Spark's zipped copy: ``PYSPARK_PYTHON`` = :data:`WORKER_PYTHON` and
    :data:`WORKER_PYTHON_ENV` = this interpreter. Python recompiles a module imported from a
    zip in every process (0.35 core-seconds per worker start on a quiet machine, many seconds
    on a loaded one, where Spark waits 10 s for a worker to connect back).

    Empty (nothing changes) unless all of: the driver is not one that ``spark-submit`` started
    (``PYSPARK_GATEWAY_PORT`` in ``environ``: its master and workers are spark-submit's);
    ``master`` is local (``local``, ``local[N]``, ...: a cluster's executors have paths of their
    own); pyspark is pip's, whose Spark home is the package itself (``SPARK_HOME`` unset or a
    directory with ``__init__.py``; ``pyspark_home``, default the imported pyspark's directory,
    stands for an unset one), so the zips are copies of the installed package; neither
    ``environ`` nor ``conf`` chooses the workers' Python (``PYSPARK_PYTHON``,
    ``spark.pyspark.python``); and the launcher is executable."""
    if "PYSPARK_GATEWAY_PORT" in environ or not master.startswith("local"):
        return {}
    if environ.get("PYSPARK_PYTHON") or conf.get("spark.pyspark.python"):
        return {}
    home = environ.get("SPARK_HOME")
    if home:
        spark_home = Path(home)
    elif pyspark_home is not None:
        spark_home = pyspark_home
    else:
        import pyspark

        spark_home = Path(pyspark.__file__).parent
    if not (spark_home / "__init__.py").is_file():
        return {}
    if not os.access(WORKER_PYTHON, os.X_OK):
        log.info("%s is not executable; the Spark workers import pyspark from Spark's zip (slower to start)",
                 WORKER_PYTHON)
        return {}
    return {"PYSPARK_PYTHON": str(WORKER_PYTHON), WORKER_PYTHON_ENV: sys.executable}




#: prctl(2) option: the signal the kernel sends a process when the thread that forked it exits.
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child the moment this process dies
    (Linux ``PR_SET_PDEATHSIG``), or None where that is not available. Only from the main
    thread: the signal follows the *thread* that forked the child, and a session built in a
    worker thread would lose its JVM when that thread ends."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the driver died before the request took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


#: The ``PYSPARK_DRIVER_PYTHON`` of a driver JVM barrierflow launches (see :func:`launching_jvm`):
#: a name no shell finds, so Spark skips its lookup of Python data sources.
NO_PYTHON_DATA_SOURCE_LOOKUP = "barrierflow-registers-its-data-sources"


@contextlib.contextmanager
def launching_jvm() -> Iterator[None]:
    """While in the block, a JVM that PySpark launches for this driver (its py4j gateway, the
    Spark driver JVM that runs the streaming queries) is started the way barrierflow needs it:

    * **It dies with the driver.** The kernel SIGKILLs it as soon as this Python process dies,
      however it dies (SIGKILL, OOM killer, a crash point). Without that the JVM notices the
      death only when it reads EOF on its stdin and then runs Spark's shutdown hooks: for a few
      hundred milliseconds to seconds after the driver is gone its streaming queries keep
      planning batches and write ``offsets/<V>`` into the stages' Spark checkpoint directories,
      by path. A restore that runs meanwhile (the next run of the pipeline, on the same host)
      materializes a stage's directory from its manifest and then finds a batch of the dead run
      in it: Spark 4.2 refuses to start such a query ("Previous batch N not found in offset
      log", the offset log's latest batch is ahead of the commit log and its predecessor is
      missing), and with the predecessor present it would replay a batch planned by the dead
      attempt. Seen once in the cycle pipeline's restore test (bench/results/history.md). A normal
      exit of the driver still lets the JVM shut down by itself (:func:`_let_jvm_exit`). Only
      where the kernel can do it (Linux, a session built in the main thread).
    * **It does not look up Python data sources.** At its first data source lookup a Spark 4
      driver starts a Python worker daemon that imports every ``pyspark_*`` package it can find
      and registers their data sources, if the command in its ``PYSPARK_DRIVER_PYTHON`` exists.
      barrierflow registers its own sources by name (:mod:`barrierflow.runtime.session`), so
      that daemon is work for nothing at every driver start (0.7 core-seconds and 0.8 s of a
      crash test's driver, measured): the JVM gets :data:`NO_PYTHON_DATA_SOURCE_LOOKUP` there.
      Spark reads that variable for this lookup only; a PySpark driver's Python workers run
      ``PYSPARK_PYTHON``, and this process's own environment is left as it is (a
      ``spark-submit`` it starts still runs its Python driver with its own).

    Does nothing when the gateway already runs (a reused session, or a driver that
    ``spark-submit`` started)."""
    from pyspark import SparkContext, java_gateway

    original = getattr(java_gateway, "Popen", None)
    if SparkContext._gateway is not None or original is None:
        yield
        return
    preexec = _die_with_parent()

    def popen(*args: object, **kwargs: object) -> object:
        env = kwargs.get("env")
        if isinstance(env, dict):
            kwargs["env"] = {**env, "PYSPARK_DRIVER_PYTHON": NO_PYTHON_DATA_SOURCE_LOOKUP}
        if preexec is not None:
            theirs = kwargs.get("preexec_fn")

            def both() -> None:
                if callable(theirs):
                    theirs()
                preexec()

            kwargs["preexec_fn"] = both
        return original(*args, **kwargs)

    java_gateway.Popen = popen  # type: ignore[assignment]
    try:
        yield
    finally:
        java_gateway.Popen = original  # type: ignore[assignment]
    process = getattr(SparkContext._gateway, "proc", None)
    if process is not None and preexec is not None:
        atexit.register(_let_jvm_exit, process)


#: How long a driver that exits normally waits for its JVM's own shutdown (seconds).
JVM_EXIT_SECONDS = 30.0


def _let_jvm_exit(process: subprocess.Popen[bytes]) -> None:
    """At a normal exit of the driver, end its JVM as before: stop the SparkContext
    (:func:`_stop_spark_context`), close the JVM's stdin (it exits on EOF, running Spark's
    shutdown hooks: temporary directories removed, event log closed) and wait for it, so the
    parent-death SIGKILL finds nothing left to kill. Only a JVM whose shutdown takes longer
    than :data:`JVM_EXIT_SECONDS` is killed by it."""
    if process.poll() is None:
        _stop_spark_context()
    try:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(timeout=JVM_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        log.warning("the Spark JVM (pid %d) did not exit within %.0f s of the driver's normal exit; it is killed "
                    "with the driver", process.pid, JVM_EXIT_SECONDS)
    except OSError:
        pass


#: How long a driver that exits normally waits for its SparkContext to stop (seconds); a
#: context that takes longer (a JVM busy or wedged) is left to the JVM's own shutdown.
CONTEXT_STOP_SECONDS = 20.0


def _stop_spark_context() -> None:
    """Stop the driver's SparkContext, if one is active, while its JVM still runs; waits at
    most :data:`CONTEXT_STOP_SECONDS`.

    Without it the JVM exits under a live context: PySpark's accumulator server (a daemon
    thread of this process, connected to by the JVM once a Python task reported accumulator
    updates) reads EOF when the JVM's end of that connection closes and prints an
    ``EOFError`` traceback after the run's output, and py4j calls still in flight fail with
    network errors. ``SparkContext.stop`` stops the context in the JVM and then that server
    (it leaves its connection within its one-second poll), so the JVM's exit closes a
    connection nobody reads. The stop runs in a daemon thread so that a JVM that does not
    answer cannot hold the exit: past the limit the JVM is ended as before, and a JVM that
    is already gone (killed) only makes PySpark warn that it could not stop it cleanly."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return

    def stop() -> None:
        try:
            context.stop()
        except Exception as exc:  # the process is exiting; the JVM is ended after this either way
            log.warning("the SparkContext did not stop cleanly at the driver's exit (%s); its JVM is ended anyway",
                        exc)

    stopper = threading.Thread(target=stop, name="barrierflow-spark-context-stop", daemon=True)
    stopper.start()
    stopper.join(CONTEXT_STOP_SECONDS)
    if stopper.is_alive():
        log.warning("the SparkContext did not stop within %.0f s of the driver's exit; its JVM is ended without "
                    "waiting for it", CONTEXT_STOP_SECONDS)


def state_store_conf(spec: SparkSpec) -> dict[str, str]:
    """The SQL settings of the spec's state store provider (``spark.state_store``), which win
    over ``spark.conf``: barrierflow's snapshot logic reads exactly these providers' files
    (:mod:`barrierflow.spark.state_files`). RocksDB keeps checkpoint format version 1 (plain
    ``<v>.zip``/``<v>.changelog`` names); changelog checkpointing is off unless ``spark.conf``
    turns it on (``ROCKSDB_CHANGELOG``): with it, a restore loads the newest zip Spark's
    maintenance happened to write and replays every changelog after it (all of them before
    the first zip), which made the first batch after a restore minutes long in the restore
    benchmark (bench/results/restore-time/); without it every version is one zip and its SSTs."""
    conf = {PROVIDER_CLASS: PROVIDERS[spec.state_store]}
    if spec.state_store == "rocksdb":
        conf["spark.sql.streaming.stateStore.checkpointFormatVersion"] = "1"
        conf[ROCKSDB_CHANGELOG] = spec.conf.get(ROCKSDB_CHANGELOG, "false")
    return conf


def apply_query_conf(session: SparkSession, spec: SparkSpec) -> None:
    """Set what a query started afterwards takes from ``spec`` on ``session`` (a shared
    session may have served a job of another spec): the shuffle partitions
    (:func:`shuffle_partitions`) and the state store (:func:`apply_state_store`). Both count
    only for a new Spark checkpoint: a restarted query takes them from its checkpoint, which is
    why :mod:`barrierflow.runtime.state_compat` refuses a spec that changed them."""
    session.conf.set(SHUFFLE_PARTITIONS, shuffle_partitions(spec))
    apply_state_store(session, spec)


def apply_state_store(session: SparkSession, spec: SparkSpec) -> None:
    """Set the spec's state store settings on ``session`` (a shared session may have served
    a job with the other provider); a query started afterwards uses them when its Spark
    checkpoint is new."""
    for key, value in state_store_conf(spec).items():
        session.conf.set(key, value)



def _log_accumulator_disconnects() -> None:
    """Route what PySpark's accumulator server (a thread of this process the JVM connects to)
    prints when its connection breaks to this module's log, at INFO with the traceback: the JVM
    went away (killed, or exiting under a live context), and how the driver learns that is its
    own error; the traceback shows under ``barrierflow --verbose``."""
    from pyspark import accumulators

    def handle_error(server: object, request: object, client_address: object) -> None:
        log.info("PySpark's accumulator server lost its connection from the Spark JVM (%s)", client_address,
                 exc_info=True)

    for name in ("AccumulatorTCPServer", "AccumulatorUnixServer"):
        server_class = getattr(accumulators, name, None)
        if server_class is not None:
            server_class.handle_error = handle_error


def driver_jvm_death() -> str | None:
    """How the Spark JVM this process started has ended, e.g. ``the Spark driver JVM (pid 4242,
    killed by SIGKILL)``; None while it runs, or when this process did not start one (no
    session yet, or a driver that ``spark-submit`` started: its JVM is the parent)."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    code = process.poll()
    if code is None:
        return None
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit code {code}"
    return f"the Spark driver JVM (pid {process.pid}, {how})"
