"""The embedded broker of ``bootstrap: embedded`` channels: Apache Kafka (KRaft) on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from barrierflow.kafka_io import embedded_broker as embedded
from barrierflow.kafka_io import kraft_broker as kraft
from barrierflow.kafka_io.embedded_broker import EmbeddedBrokerError, broker_answers, embedded_broker
from barrierflow.processes import process_alive

pytestmark = pytest.mark.kafka


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    finally:
        consumer.close()
    return {tp.partition: o for tp, o in ends.items()}


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(count):
            producer.send(topic, value=f"r{i}".encode(), partition=i % 2)
        producer.flush(timeout=30)
    finally:
        producer.close()


def _run_holding_a_broker(data_dir: Path, records: int, *, own_session: bool = False
                          ) -> tuple[subprocess.Popen[str], int]:
    """A child process that starts the embedded broker on ``data_dir``, produces ``records``
    acknowledged records to topic ``kept`` (2 partitions) and then holds the broker until it is
    killed (it blocks reading its stdin: no timer). Returns the child and the broker's pid,
    once the records are acknowledged."""
    script = textwrap.dedent(f"""
        import sys
        from barrierflow.kafka_io.embedded_broker import embedded_broker, broker_pid
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_embedded_broker import _produce
        with embedded_broker({str(data_dir)!r}) as address:
            _produce(address, "kept", {records})
            print(broker_pid(address), flush=True)
            sys.stdin.read()  # held until the test kills this process (or closes stdin)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, start_new_session=own_session,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip().isdigit(), f"the child did not start its broker (exit {child.poll()})"
    return child, int(line)


def test_embedded_broker_answers_on_loopback_while_open_and_is_stopped_after() -> None:
    with embedded_broker() as address:
        host, port = address.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert broker_answers(address, timeout=2.0)
        pid = embedded.broker_pid(address)
        assert pid is not None
    assert not broker_answers(address, timeout=1.0)
    assert embedded.broker_pid(address) is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_broker_jvm_runs_with_the_options_the_environment_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.JAVA_OPTIONS_ENV, raising=False)
    assert embedded.java_options() == kraft.DEFAULT_JVM_OPTIONS
    monkeypatch.setenv(embedded.JAVA_OPTIONS_ENV, "  ")
    assert embedded.java_options() == kraft.DEFAULT_JVM_OPTIONS  # blank: the defaults, never no heap bound
    monkeypatch.setenv(embedded.JAVA_OPTIONS_ENV, "-Xmx300m -XX:TieredStopAtLevel=1 -Dx='a b'")
    assert embedded.java_options() == ("-Xmx300m", "-XX:TieredStopAtLevel=1", "-Dx=a b")
    monkeypatch.setenv(embedded.JAVA_OPTIONS_ENV, "-Dx='unclosed")
    with pytest.raises(EmbeddedBrokerError, match="BARRIERFLOW_EMBEDDED_BROKER_JAVA_OPTIONS cannot be read"):
        embedded.java_options()
    monkeypatch.setenv(embedded.JAVA_OPTIONS_ENV, "-Xmx300m -XX:TieredStopAtLevel=1 -Dx='a b'")
    with embedded_broker() as address:
        pid = embedded.broker_pid(address)
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert [b"-Xmx300m", b"-XX:TieredStopAtLevel=1", b"-Dx=a b"] == command[1:4], command[:6]


def test_records_survive_a_stop_and_start_of_the_data_dir(tmp_path: Path) -> None:
    with embedded_broker(tmp_path / "broker") as address:
        _produce(address, "kept", 1000)
    with embedded_broker(tmp_path / "broker") as again:  # another port, same data
        assert _end_offsets(again, "kept", 2) == {0: 500, 1: 500}


def test_a_second_broker_on_the_same_data_dir_is_refused_with_the_reason(tmp_path: Path) -> None:
    with embedded_broker(tmp_path / "broker"), pytest.raises(EmbeddedBrokerError, match="already runs on the data dir"):
        with embedded_broker(tmp_path / "broker"):
            pass


def test_missing_kafka_jars_name_the_artifact_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARRIERFLOW_JVM_CACHE", str(tmp_path / "empty-cache"))
    missing = r"JVM artifact .* of set .kafka-broker. is not installed .*make install"
    with pytest.raises(EmbeddedBrokerError, match=missing):
        with embedded_broker():
            pass


def test_the_broker_is_stopped_and_keeps_its_data_when_its_starter_is_killed(tmp_path: Path) -> None:
    """The parent-death signal: a SIGKILLed ``barrierflow run`` leaves no broker behind and
    loses nothing the broker acknowledged, so the same command can start
    it again on the same data dir."""
    child, broker = _run_holding_a_broker(tmp_path / "broker", 400)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(broker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(broker, signal.SIGKILL)
        pytest.fail("the broker outlived the process that started it")
    with embedded_broker(tmp_path / "broker") as again:
        assert _end_offsets(again, "kept", 2) == {0: 200, 1: 200}


def test_a_sigkill_of_the_starters_process_group_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """The broker runs in a session of its own: a SIGKILL of the whole process group of the
    run that started it (what ``barrierflow chaos`` does) does not reach it, and the
    parent-death signal makes it shut down. A new broker started on the same data dir at
    once (the restarted run) waits for the old one and then has every acknowledged record,
    including those produced in the last moment before the kill."""
    child, broker = _run_holding_a_broker(tmp_path / "broker", 3000, own_session=True)
    assert os.getpgid(broker) != child.pid  # not in the run's process group
    os.killpg(child.pid, signal.SIGKILL)  # acknowledged writes were made within the last second
    child.wait(timeout=10)
    with embedded_broker(tmp_path / "broker") as again:  # started at once: waits for the old broker
        assert _end_offsets(again, "kept", 2) == {0: 1500, 1: 1500}
    assert not process_alive(broker)  # exited (a zombie until its new parent reaps it)
