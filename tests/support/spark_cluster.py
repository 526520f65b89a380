"""A throwaway Spark standalone cluster for tests: a master and workers from the installed PySpark.

``running_standalone_cluster()`` starts ``spark-class org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker`` (from the ``pyspark`` wheel's ``bin/``, no Docker) on
127.0.0.1 on free ports, waits until the master's JSON status (``http://127.0.0.1:<webui>/json``)
lists every worker ``ALIVE``, yields a :class:`StandaloneCluster` and stops the workers, then the
master, afterwards (their whole process groups: the executors a worker started go with it).

The workers get ``worker_env`` in their environment, and a worker passes its environment to the
executors it launches: that is how executors receive S3 credentials without them appearing in
Spark's configuration, its logs or the application's command line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from barrierflow.errors import BarrierflowError
from barrierflow.local_ports import free_port

from tests.support.processes import log_tail

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: JVM options of the master and worker daemons: small heaps, C1 only (they only coordinate).
DAEMON_MEMORY = "256m"
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Executors of the tests' short-lived applications: C1 only, the serial GC.
EXECUTOR_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


#: spark-submit settings of the tests' short-lived applications: the driver on loopback, one small
#: executor with C1 only and the serial GC.
SUBMIT_CONF = {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST, "spark.executor.memory": "512m",
               "spark.executor.extraJavaOptions": EXECUTOR_JAVA_OPTS}


class SparkClusterError(BarrierflowError):
    """The standalone cluster could not be started, or did not reach the state waited for."""


def spark_home() -> Path:
    """The Spark distribution inside the installed ``pyspark`` wheel (its ``bin/`` has
    ``spark-class`` and ``spark-submit``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_submit() -> Path:
    """``bin/spark-submit`` of the installed PySpark."""
    return spark_home() / "bin" / "spark-submit"


@dataclass(frozen=True)
class StandaloneCluster:
    """A running standalone cluster.

    Attributes:
        master_url: what ``spark-submit --master`` takes, ``spark://127.0.0.1:PORT``.
        web_url: the master's web UI, ``http://127.0.0.1:PORT`` (``/json`` is its status).
        log_dir: the daemons' logs (``master.log``, ``worker-<n>.log``) and the workers' work
            dirs (``work-<n>/<app>/<executor>/stderr``: the executors' logs).
    """

    master_url: str
    web_url: str
    log_dir: Path

    def submit_command(self, application: Path, *args: str, conf: Mapping[str, str] | None = None) -> list[str]:
        """``spark-submit --master <this cluster> --conf ... APPLICATION ARGS`` in client mode (the
        driver runs where spark-submit runs, bound to 127.0.0.1), with small executors:
        ``SUBMIT_CONF`` updated by ``conf``."""
        command = [str(spark_submit()), "--master", self.master_url]
        for key, value in {**SUBMIT_CONF, **(conf or {})}.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, str(application), *args]

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
        with opener.open(f"{self.web_url}/json/", timeout=timeout) as response:
            return dict(json.loads(response.read()))

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]

    def active_apps(self) -> list[dict[str, Any]]:
        return list(self.status().get("activeapps", []))

    def wait_until_idle(self, timeout: float = 60.0) -> None:
        """Wait until the master runs no application (a killed driver's application is removed
        once the master notices its driver is gone, which frees the workers' cores).

        Raises:
            SparkClusterError: applications still active after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            active = self.active_apps()
            if not active:
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(f"applications still active on {self.master_url} after {timeout:.0f}s: "
                                        f"{[(a.get('id'), a.get('state')) for a in active]}")
            time.sleep(0.2)

    def logs(self) -> str:
        """Every daemon and executor log of the cluster, concatenated (for checks such as "no
        secret appears in any log")."""
        parts = []
        for path in sorted(self.log_dir.rglob("*")):
            if path.is_file() and (path.suffix == ".log" or path.name in ("stderr", "stdout")):
                parts.append(f"==> {path} <==\n{path.read_text(errors='replace')}")
        return "\n".join(parts)


def _daemon_env(extra: Mapping[str, str], java_options: str = "") -> dict[str, str]:
    env = {**os.environ, **extra, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST,
           "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
           "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTS} -Dspark.port.maxRetries=0 {java_options}".rstrip()}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    return env


def _start(args: list[str], log_path: Path, env: dict[str, str],
           wrapper: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen([*wrapper, str(spark_home() / "bin" / "spark-class"), *args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_group(proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """SIGTERM the process group ``proc`` leads (a worker and the executors it launched); SIGKILL
    the group if its leader is not gone after ``timeout`` seconds, or other members remain."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("%s pid %s ignored SIGTERM; killing its process group", what, proc.pid)
    deadline = time.monotonic() + min(timeout, 5.0)  # the executors' own shutdown
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)


class _DaemonExitedError(SparkClusterError):
    """A daemon exited while the cluster started (usually a port taken since it was picked)."""


def _wait_ready(cluster: StandaloneCluster, procs: dict[str, subprocess.Popen[bytes]], workers: int,
                timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "the master's web UI did not answer"
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise _DaemonExitedError(f"spark {name} exited with code {proc.returncode} while starting; its log:\n"
                                         f"{log_tail(cluster.log_dir / f'{name}.log')}")
        try:
            alive = cluster.alive_workers()
            if len(alive) >= workers:
                return
            last = f"{len(alive)} of {workers} workers ALIVE"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = f"the master's web UI did not answer ({exc})"
        time.sleep(0.2)
    raise SparkClusterError(f"standalone cluster at {cluster.master_url} not ready after {timeout:.0f}s: {last}; "
                            f"master log:\n{log_tail(cluster.log_dir / 'master.log')}")


def _start_cluster(log_dir: Path, workers: int, cores: int, memory: str, worker_env: Mapping[str, str],
                   worker_wrapper: Sequence[str], startup_timeout: float,
                   procs: dict[str, subprocess.Popen[bytes]]) -> StandaloneCluster:
    """Start the daemons on freshly picked ports (into ``procs``) and wait until they are ready."""
    port, web_port = free_port(HOST), free_port(HOST)
    cluster = StandaloneCluster(master_url=f"spark://{HOST}:{port}", web_url=f"http://{HOST}:{web_port}",
                                log_dir=log_dir)
    # No REST submission server: it would bind the fixed port 6066 (taken by another cluster
    # on this machine, the master runs on without workers), and client-mode submits never use it.
    procs["master"] = _start([MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(web_port)],
                             log_dir / "master.log", _daemon_env({}, "-Dspark.master.rest.enabled=false"))
    for n in range(workers):
        work = log_dir / f"work-{n}"
        work.mkdir(exist_ok=True)
        procs[f"worker-{n}"] = _start(
            [WORKER_CLASS, cluster.master_url, "--host", HOST, "--cores", str(cores), "--memory", memory,
             "--webui-port", str(free_port(HOST)), "--work-dir", str(work)],
            log_dir / f"worker-{n}.log", _daemon_env(worker_env), worker_wrapper)
    _wait_ready(cluster, procs, workers, startup_timeout)
    return cluster


def _stop_all(procs: dict[str, subprocess.Popen[bytes]], timeout: float) -> None:
    for name in sorted(procs, reverse=True):  # workers first, the master last
        _stop_group(procs[name], timeout, f"spark {name}")
    procs.clear()


@contextlib.contextmanager
def running_standalone_cluster(log_dir: Path, *, workers: int = 1, cores: int = 2, memory: str = "1g",
                               worker_env: Mapping[str, str] | None = None, worker_wrapper: Sequence[str] = (),
                               startup_timeout: float = 120.0, stop_timeout: float = 20.0
                               ) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory`` each) on 127.0.0.1
    and yield the cluster once the master lists every worker ALIVE; stop them on exit.

    ``worker_env`` is added to the workers' environment (and so to their executors'), never to
    the master's. ``worker_wrapper`` is a command prefix for each worker that must end by
    exec-ing its arguments (e.g. ``unshare`` giving the worker a file system view of its own).
    The daemons never move to another port (``spark.port.maxRetries=0``): a daemon that finds its
    port taken exits, and the whole start is tried again on new ports (three times).
    Raises :class:`SparkClusterError` when a daemon exits in each try or the cluster is not
    ready within ``startup_timeout`` seconds (with the daemon's or the master's log).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for attempt in range(3):
            try:
                cluster = _start_cluster(log_dir, workers, cores, memory, worker_env or {}, worker_wrapper,
                                         startup_timeout, procs)
                break
            except _DaemonExitedError as exc:
                _stop_all(procs, stop_timeout)
                if attempt == 2:
                    raise
                logger.info("%s; starting the cluster again on other ports", str(exc).splitlines()[0])
        logger.info("standalone cluster ready at %s (%d workers)", cluster.master_url, workers)
        yield cluster
    finally:
        _stop_all(procs, stop_timeout)


#: Runs its arguments in a new mount namespace with an empty tmpfs over the folder given first.
HIDE = 'mount -t tmpfs barrierflow-hidden "$0" && exec "$@"'


def hiding_wrapper(folder: Path) -> tuple[list[str], str]:
    """A worker command prefix (``worker_wrapper``) that hides ``folder`` from the worker: a new
    mount namespace (``unshare -m``) with an empty tmpfs over it, so the worker and its executors
    see none of what the driver keeps there, as on a machine of their own. Returns the prefix and
    ``""``, or ``[]`` and why it cannot work here (no ``unshare``, mount namespaces not allowed);
    checked by hiding a file written into ``folder`` first."""
    (folder / "visible").write_text("the driver sees this; the worker must not", encoding="utf-8")
    wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE, str(folder)]
    try:
        probe = subprocess.run([*wrapper, "test", "!", "-e", str(folder / "visible")], capture_output=True,
                               timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"unshare is not available here: {exc}"
    if probe.returncode != 0:
        return [], (f"mount namespaces are not allowed here (unshare exit {probe.returncode}: "
                    f"{probe.stderr.decode(errors='replace').strip()[:200]})")
    return wrapper, ""
