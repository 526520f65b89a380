"""``examples/local_kafka.py`` starts a Kafka broker a client can use and stops it as its
docstring and examples/user-totals/README.md say: started in the background (``&``), it stops on
SIGTERM (``kill PID``, the command it prints), the broker's JVM ends with it, and the script exits 0.

The script runs as the README runs it, as a process of its own with the interpreter of the
suite; a broker on free ports of 127.0.0.1, its data in the test's directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.support.kafka_broker import KafkaEndpoint, partition_records

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180), pytest.mark.slow(15)]

SCRIPT = PROJECT_ROOT / "examples" / "local_kafka.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not a running broker
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def test_local_kafka_serves_a_client_and_stops_on_sigterm(tmp_path: Path) -> None:
    from kafka import KafkaProducer

    data_dir = tmp_path / "broker"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT / "include"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(data_dir)], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        export = proc.stdout.readline()  # blocks until the broker answers (or the script ends)
        assert export.startswith("export KAFKA_BOOTSTRAP=127.0.0.1:"), \
            f"{export!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"  # type: ignore[union-attr]
        bootstrap = export.strip().split("=", 1)[1]
        assert proc.stdout.readline().strip() == f"# stop it with: kill {proc.pid}"
        broker = json.loads((data_dir / "broker.pid").read_text())["broker"]
        assert _alive(broker)

        topic, value = f"local-kafka-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex.encode()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        producer.send(topic, value).get(timeout=60)
        producer.close()
        assert [r.value for r in partition_records(KafkaEndpoint(bootstrap, is_test_broker=False), topic, 0)] == [value]

        proc.send_signal(signal.SIGTERM)  # what `kill PID` and `kill %1` send
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "the Kafka broker stopped" in err
        assert not _alive(broker), f"the broker's JVM (pid {broker}) outlived the script"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
