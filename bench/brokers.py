"""The embedded broker, decided by measurement: Apache Kafka (KRaft, from the pinned jars) beside
noida-db (a one-binary Kafka-protocol broker from PyPI), one after the other in one run.

For each broker, on a fresh data dir on 127.0.0.1:

1. **start**: seconds from launching it to its first answered metadata request (the launcher's
   own readiness check), including Kafka's one-off storage format;
2. **memory**: the broker process's resident set (VmRSS) right after start, and after the run;
3. **produce**: ``--records`` JSON records (1,000 keys) produced with confluent-kafka (librdkafka,
   what the channels use) to a topic of ``--partitions`` partitions;
4. **consume**: the topic read back whole, with confluent-kafka and with kafka-python (the client
   the sink and admin use), each from offset 0 with no consumer group, until every record was
   read or ``--read-timeout`` seconds passed (a read that stalls is reported, not hidden);
5. **transaction timeout**: a transactional producer opens a transaction with a 1 s
   ``transaction.timeout.ms`` and is killed; whether the broker aborts it by itself within 30 s
   (the path a crashed Kafka sink's driver leaves behind).

noida-db is measured when its package is importable (``pip install noida-db==0.2.3``; it is no
longer a requirement of barrierflow). Usage (from the repository root)::

    PYTHONPATH=include:. .venv/bin/python -m bench.brokers [--records 1000000] [--partitions 4]

The numbers are printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

KEYS = 1000


def say(line: str = "") -> None:
    print(line, flush=True)


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


@contextlib.contextmanager
def apache_kafka() -> Iterator[tuple[str, int]]:
    from barrierflow.kafka_io.kraft_broker import kraft_broker

    with kraft_broker(None) as broker:
        yield broker.bootstrap_servers, broker.pid


@contextlib.contextmanager
def noida_db() -> Iterator[tuple[str, int]]:
    """noida-db's Kafka service on a free port (its binary, as barrierflow once launched it)."""
    import importlib.resources

    from barrierflow.kafka_io.kraft_broker import broker_answers
    from barrierflow.local_ports import free_port

    binary = Path(str(importlib.resources.files("noida_db") / "noida-db"))
    with tempfile.TemporaryDirectory(prefix="bench-noida-") as data:
        port = free_port()
        proc = subprocess.Popen([str(binary), "start", "--data-dir", data, "--only", "kafka", "--kafka-port",
                                 str(port), "--host", "127.0.0.1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while not broker_answers(f"127.0.0.1:{port}", 1.0):
                if proc.poll() is not None:
                    raise RuntimeError(f"noida-db exited with {proc.returncode}")
                time.sleep(0.05)
            yield f"127.0.0.1:{port}", proc.pid
        finally:
            proc.kill()
            proc.wait()


def _create_topic(servers: str, topic: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(servers: str, topic: str, records: int, partitions: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    start = time.perf_counter()
    for i in range(records):
        value = json.dumps({"key": i % KEYS, "value": i, "event_time": 1_700_000_000_000 + i}).encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return records / (time.perf_counter() - start)


def consume_confluent(servers: str, topic: str, records: int, partitions: int, timeout: float) -> tuple[int, float]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, start = 0, time.perf_counter()
    try:
        while got < records and time.perf_counter() - start < timeout:
            for message in consumer.consume(10000, 1.0):
                if message.error() is None:
                    got += 1
    finally:
        consumer.close()
    return got, got / (time.perf_counter() - start)


def consume_kafka_python(servers: str, topic: str, records: int, partitions: int, timeout: float) -> tuple[int, float]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers, group_id=None, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got, start = 0, time.perf_counter()
    try:
        while got < records and time.perf_counter() - start < timeout:
            for batch in consumer.poll(timeout_ms=1000, max_records=50_000).values():
                got += len(batch)
    finally:
        consumer.close()
    return got, got / (time.perf_counter() - start)


def timed_out_transaction_aborted(servers: str, wait: float = 30.0) -> str:
    """Kill a producer with an open 1 s transaction; poll the partition's last stable offset."""
    from kafka import KafkaConsumer, TopicPartition

    topic = f"txn-{uuid.uuid4().hex[:8]}"
    _create_topic(servers, topic, 1)
    script = textwrap.dedent(f"""
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers={servers!r}, transactional_id="bench-{topic}", transaction_timeout_ms=1000)
        p.init_transactions(); p.begin_transaction(); p.send({topic!r}, b"x").get(timeout=10)
        print("open", flush=True)
        import time; time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    tp = TopicPartition(topic, 0)
    start = time.perf_counter()
    while time.perf_counter() - start < wait:
        consumer = KafkaConsumer(bootstrap_servers=servers, isolation_level="read_committed")
        try:
            stable = consumer.end_offsets([tp])[tp]
        finally:
            consumer.close()
        if stable > 0:
            return f"aborted after {time.perf_counter() - start:.1f} s"
        time.sleep(0.5)
    return f"still open after {wait:.0f} s"


def _rate(rate: float, got: int, records: int) -> str:
    return f"{rate:,.0f}" + ("" if got == records else f" ({got:,} of {records:,} read)")


def measure(name: str, broker: Callable[[], contextlib.AbstractContextManager[tuple[str, int]]], records: int,
            partitions: int, read_timeout: float) -> dict[str, str]:
    start = time.perf_counter()
    with broker() as (servers, pid):
        started = time.perf_counter() - start
        rss_start = _rss_mib(pid)
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        _create_topic(servers, topic, partitions)
        produced = produce(servers, topic, records, partitions)
        got_c, rate_c = consume_confluent(servers, topic, records, partitions, read_timeout)
        got_k, rate_k = consume_kafka_python(servers, topic, records, partitions, read_timeout)
        txn = timed_out_transaction_aborted(servers)
        rss_end = _rss_mib(pid)
    row = {"broker": name, "start (s)": f"{started:.2f}", "RSS after start (MiB)": f"{rss_start:.0f}",
           "RSS after run (MiB)": f"{rss_end:.0f}", "produce (records/s)": f"{produced:,.0f}",
           "consume, confluent-kafka (records/s)": _rate(rate_c, got_c, records),
           "consume, kafka-python (records/s)": _rate(rate_k, got_k, records),
           "timed-out transaction": txn}
    for key, value in row.items():
        say(f"  {key}: {value}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--read-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    say(f"# brokers, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.records:,} JSON records, "
        f"{args.partitions} partitions, {os.cpu_count()} cores")
    rows = []
    from tests.support.kafka_broker import kafka_version

    say(f"Apache Kafka {kafka_version()}")
    rows.append(measure(f"Apache Kafka {kafka_version()} (KRaft)", apache_kafka, args.records, args.partitions,
                        args.read_timeout))
    if importlib.util.find_spec("noida_db") is not None:
        say("noida-db")
        rows.append(measure("noida-db", noida_db, args.records, args.partitions, args.read_timeout))
    else:
        say("noida-db: not installed (pip install noida-db==0.2.3), not measured")
    keys = list(rows[0])
    say("")
    say("| " + " | ".join(keys) + " |")
    say("|" + "---|" * len(keys))
    for row in rows:
        say("| " + " | ".join(row[k] for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
