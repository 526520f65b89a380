"""A single-node Apache Kafka broker (KRaft: broker and controller in one JVM) on 127.0.0.1.

:func:`kraft_broker` runs Apache Kafka from the pinned jars of the ``kafka-broker`` set
(:mod:`barrierflow.jvm`; ``make install`` fetches and verifies them), with its log dirs in a
data dir, on free ports, and yields a :class:`RunningBroker` once kafka-python can bootstrap
from it and list its topics (a metadata request answered; polled until a deadline, never a
fixed sleep). It is the embedded broker of ``bootstrap: embedded`` channels and the test
suite's broker.

Contract:

* the data dir is formatted once (``kafka-storage format``, with the SCRAM users of
  :class:`BrokerSecurity` if any); a later start on the same data dir keeps every topic,
  committed record, transaction state and committed consumer offset (on other ports);
* the broker runs in a session (process group) of its own and gets SIGTERM when the process
  that started it dies (Linux parent-death signal, also on SIGKILL of the starter): a killed
  ``barrierflow run`` does not leave it running. Kafka writes every acknowledged record to
  its log segment files before it answers, so a SIGKILL of the broker itself loses nothing
  the OS had been handed;
* one broker per data dir: ``broker.pid`` beside the data names the broker and its starter.
  A start that finds the data dir locked by a broker whose starter is dead (a killed run's
  broker, shutting down) waits for it to exit; one whose starter is alive is refused;
* on exit the broker is stopped (SIGTERM: a controlled shutdown; SIGKILL after
  ``stop_timeout``). A broker on a temporary data dir is killed at once: nothing is kept.
* with :class:`BrokerSecurity`, a second client listener speaks SASL_SSL (SCRAM-SHA-256 and
  SCRAM-SHA-512 over TLS with the given PEM key and certificate); the PLAINTEXT listener stays.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.jvm.classpath import class_path
from barrierflow.jvm.errors import JvmArtifactError
from barrierflow.local_ports import free_port
from barrierflow.processes import process_alive

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
#: The JVM artifact set that holds Apache Kafka's broker.
ARTIFACT_SET = "kafka-broker"
#: The file beside the data that names the running broker: ``{"broker": pid, "starter": pid}``.
PID_FILE = "broker.pid"
#: How often a start whose port was taken between picking and binding is retried.
START_ATTEMPTS = 3
#: The broker's JVM: a small heap (a single-node broker for pipelines and tests), the serial
#: collector (one GC thread on a 2-core machine).
DEFAULT_JVM_OPTIONS: tuple[str, ...] = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
#: Broker settings of a single node: internal topics with replication 1 and few partitions,
#: no rebalance delay, timed-out transactions aborted within about a second of their timeout, and
#: no no-op records in the metadata log (the controller writes one every 500 ms by default so
#: that other nodes can tell they are behind; a single node has none, and an idle broker used
#: about 40 % less CPU without them: ``python -m bench.idle_broker``).
SINGLE_NODE_SETTINGS: Mapping[str, str] = {
    "metadata.max.idle.interval.ms": "0",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "num.partitions": "1",
}
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_PR_SET_PDEATHSIG = 1


class KafkaBrokerStartError(BarrierflowError):
    """The Kafka broker could not be started, did not become ready, or its data dir is taken."""


@dataclass(frozen=True)
class BrokerSecurity:
    """A SASL_SSL listener: SCRAM users, and the broker's TLS identity.

    Attributes:
        users: SCRAM user name -> password (created for both SCRAM mechanisms at format time).
        key_and_certificate_pem: one PEM file with the broker's private key (PKCS#8, not
            encrypted) followed by its certificate chain.
    """

    users: Mapping[str, str]
    key_and_certificate_pem: Path


@dataclass(frozen=True)
class RunningBroker:
    """A started broker.

    Attributes:
        bootstrap_servers: the PLAINTEXT listener, ``host:port``.
        secure_bootstrap_servers: the SASL_SSL listener, or None without :class:`BrokerSecurity`.
        pid: the broker JVM's process id.
        data_dir: where its data, configuration and log (``broker.log``) live.
    """

    bootstrap_servers: str
    secure_bootstrap_servers: str | None
    pid: int
    data_dir: Path
    log_path: Path = field(compare=False)


def broker_answers(bootstrap_servers: str, timeout: float) -> bool:
    """Whether kafka-python can bootstrap from ``bootstrap_servers`` and list its topics."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
    try:  # a refused TCP connect is cheaper to see than a client's bootstrap timeout
        with socket.create_connection((host, int(port)), timeout=min(timeout, 1.0)):
            pass
    except OSError:
        return False
    timeout_ms = max(int(timeout * 1000), 1000)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="barrierflow-broker-probe",
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


def _cluster_id() -> str:
    """A random cluster id (Kafka's base64 form of a UUID). Like Kafka's ``Uuid.randomUuid``, never
    one that starts with ``-``: ``kafka-storage format -t -abc...`` takes it for an option and fails
    (one start in 64 did)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def _properties(root: Path, ports: Mapping[str, int], security: BrokerSecurity | None,
                settings: Mapping[str, str]) -> dict[str, str]:
    listeners = [f"PLAINTEXT://{HOST}:{ports['plain']}", f"CONTROLLER://{HOST}:{ports['controller']}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    advertised = [f"PLAINTEXT://{HOST}:{ports['plain']}"]
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{ports['controller']}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(root / "data"),
    }
    if security is not None:
        listeners.append(f"SASL_SSL://{HOST}:{ports['secure']}")
        protocols.append("SASL_SSL:SASL_SSL")
        advertised.append(f"SASL_SSL://{HOST}:{ports['secure']}")
        props.update({
            "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(security.key_and_certificate_pem),
        })
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    props.update({"listeners": ",".join(listeners), "advertised.listeners": ",".join(advertised),
                  "listener.security.protocol.map": ",".join(protocols)})
    props.update(SINGLE_NODE_SETTINGS)
    props.update(settings)
    return props


def _write_config(root: Path, props: Mapping[str, str]) -> tuple[Path, Path]:
    config = root / "config"
    config.mkdir(parents=True, exist_ok=True)
    server = config / "server.properties"
    server.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    log4j = config / "log4j2.properties"
    log4j.write_text(
        "status = warn\n"
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {root / 'broker.log'}\n"
        "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = WARN\nrootLogger.appenderRef.file.ref = file\n"
        "logger.server.name = kafka.server.KafkaRaftServer\nlogger.server.level = INFO\n",
        encoding="utf-8")
    return server, log4j


def _java_env() -> dict[str, str]:
    """The broker's environment: the caller's, without JVM options meant for other JVMs
    (a Spark driver's ``_JAVA_OPTIONS``, e.g. its class-data-sharing archive)."""
    return {k: v for k, v in os.environ.items() if k not in ("_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")}


def _format(root: Path, server: Path, cp: str, security: BrokerSecurity | None) -> None:
    """Format the data dir once (a formatted one keeps its cluster id and data)."""
    if (root / "data" / "meta.properties").is_file():
        return
    command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
               "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(server), "--ignore-formatted"]
    for name, password in (security.users.items() if security else ()):
        for mechanism in SCRAM_MECHANISMS:
            command += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    done = subprocess.run(command, capture_output=True, text=True, env=_java_env(), check=False)
    if done.returncode != 0:
        # The command line carries SCRAM passwords: never put it in the message.
        raise KafkaBrokerStartError(f"formatting the Kafka data dir {root / 'data'} failed "
                                    f"({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the broker when its starter dies; None without prctl."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return set_signal


def _stop(proc: subprocess.Popen[bytes], timeout: float, graceful: bool) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)  # a paused broker (outage tests) cannot act on SIGTERM
    if not graceful:
        proc.kill()
        proc.wait(timeout=timeout)
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("Kafka broker pid %s ignored SIGTERM for %.0fs; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait(timeout=timeout)


def _log_since(path: Path, start: int, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as log_file:
            log_file.seek(start)
            return log_file.read().decode(errors="replace")[-limit:]
    except OSError:
        return ""


def _holder(root: Path) -> tuple[int, int] | None:
    """``(broker, starter)`` pids named by ``root``'s pid file, if it names a live broker."""
    try:
        named = json.loads((root / PID_FILE).read_text())
        broker, starter = int(named["broker"]), int(named["starter"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (broker, starter) if process_alive(broker) else None


def _wait_for_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _take_data_dir(root: Path, takeover_timeout: float) -> None:
    """Refuse a data dir a live run's broker holds; wait for a killed run's broker to exit."""
    holder = _holder(root)
    if holder is None:
        return
    broker, starter = holder
    if process_alive(starter):
        raise KafkaBrokerStartError(
            f"another Kafka broker (pid {broker}, started by pid {starter}) already runs on the data dir "
            f"{root / 'data'}: is this pipeline running in another process? Stop that one first")
    log.warning("the Kafka broker of a killed run (pid %s) still holds %s; waiting up to %.0fs for it to exit",
                broker, root, takeover_timeout)
    if not _wait_for_exit(broker, takeover_timeout):
        raise KafkaBrokerStartError(
            f"the Kafka broker of a killed run (pid {broker}) still holds the data dir {root / 'data'} after "
            f"{takeover_timeout:.0f}s; it shuts down on SIGTERM: 'kill {broker}', then run the pipeline again")


@contextlib.contextmanager
def kraft_broker(data_dir: str | os.PathLike[str] | None = None, *, startup_timeout: float = 60.0,
                 stop_timeout: float = 15.0, takeover_timeout: float = 60.0,
                 security: BrokerSecurity | None = None, settings: Mapping[str, str] | None = None,
                 jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS) -> Iterator[RunningBroker]:
    """Run Apache Kafka on 127.0.0.1 with its data in ``data_dir`` (a temporary dir, removed on
    exit, if None); yield a :class:`RunningBroker` once it answers (see the module contract).

    ``settings`` override broker properties; ``jvm_options`` replace the JVM's.

    Raises:
        KafkaBrokerStartError: the jars are not installed (names the fix), another live run's
            broker holds ``data_dir``, or the broker exited early or did not answer within
            ``startup_timeout`` (the message carries its log).
    """
    try:
        cp = class_path(ARTIFACT_SET)
    except JvmArtifactError as exc:
        raise KafkaBrokerStartError(f"Apache Kafka's jars are missing: {exc}") from exc
    with contextlib.ExitStack() as stack:
        temporary = data_dir is None
        if data_dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="barrierflow-kafka-")))
        else:
            root = Path(data_dir)
            root.mkdir(parents=True, exist_ok=True)
        _take_data_dir(root, takeover_timeout)
        log_path = root / "broker.log"
        die_with_parent = _parent_death_signal()
        problem = ""
        for _attempt in range(START_ATTEMPTS):
            ports = {"plain": free_port(), "controller": free_port()}
            if security is not None:
                ports["secure"] = free_port()
            server, log4j = _write_config(root, _properties(root, ports, security, settings or {}))
            _format(root, server, cp, security)
            start = log_path.stat().st_size if log_path.exists() else 0
            with open(root / "broker.out", "ab") as out:
                proc = subprocess.Popen(
                    ["java", *jvm_options, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, "kafka.Kafka",
                     str(server)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=_java_env(),
                    preexec_fn=die_with_parent, start_new_session=True)
            bootstrap = f"{HOST}:{ports['plain']}"
            try:
                deadline = time.monotonic() + startup_timeout
                ready = False
                while time.monotonic() < deadline and proc.poll() is None:
                    if broker_answers(bootstrap, timeout=1.0):
                        ready = True
                        break
                    time.sleep(0.05)
                if not ready:
                    text = _log_since(log_path, start) + _log_since(root / "broker.out", 0)
                    if proc.poll() is None:
                        raise KafkaBrokerStartError(
                            f"the Kafka broker (data dir {root}) at {bootstrap} did not answer a metadata request "
                            f"within {startup_timeout:.0f}s (a loaded machine?); its log ({log_path}):\n{text}")
                    if "Address already in use" in text:
                        problem = f"a port of {sorted(ports.values())} was taken before the broker could bind it"
                        log.info("%s; retrying on other ports", problem)
                        continue
                    if "Failed to acquire lock" in text:
                        raise KafkaBrokerStartError(
                            f"another Kafka broker already runs on the data dir {root / 'data'} (is this pipeline "
                            f"running in another process?); its log ({log_path}):\n{text}")
                    raise KafkaBrokerStartError(
                        f"the Kafka broker exited with code {proc.returncode} at start (data dir {root}); "
                        f"its log ({log_path}):\n{text}")
                log.info("Apache Kafka broker pid %s ready at %s, data dir %s", proc.pid, bootstrap, root)
                (root / PID_FILE).write_text(json.dumps({"broker": proc.pid, "starter": os.getpid()}))
                secure = f"{HOST}:{ports['secure']}" if security is not None else None
                yield RunningBroker(bootstrap, secure, proc.pid, root, log_path)
                return
            finally:
                _stop(proc, stop_timeout, graceful=not temporary)
        raise KafkaBrokerStartError(f"{problem} ({START_ATTEMPTS} attempts); the broker's log ({log_path})")
