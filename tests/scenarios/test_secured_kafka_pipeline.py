"""A pipeline reads and writes a Kafka that enforces SASL/SCRAM and TLS, and its password appears
nowhere it leaves anything.

The pipeline: Kafka source (format json) -> projection -> Kafka sink (exactly once), both on the
test broker's SASL_SSL listener (SCRAM-SHA-256 over TLS with a throwaway CA), the password given
as ``env:VAR``. It runs as ``barrierflow run --until-exhausted`` in a new driver process with every
logger at DEBUG (kafka-python logs its requests' bytes and its admin client's configuration
there), whose environment holds the password: the driver's clients (topic metadata, offsets, the
sink's transactional producer and marker reads) and the executors' (range reads) each resolve it
themselves. The committed output is read back through the sink's markers over SASL_SSL. A
two-stage pipeline does the same with its channel on that listener (its topic created by the run
through kafka-python's admin client, which logs its configuration at DEBUG).

Scanned for the password (raw and base64) and for a distinctive token of it: the driver's stdout
and stderr (its log, Spark's and the Python workers' output), and every file under the test's
directory: the spec, the work dir with Spark's checkpoint (offsets, source options, state) and the
sink's staging, and the checkpoint store (manifests, ledger).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from barrierflow.kafka_io import BatchProducer, ProducerSettings
from barrierflow.kafka_io.committed_output import committed_records
from barrierflow.sinks.parquet import read_committed
from barrierflow.spec.kafka_client import KafkaClientSpec

from tests.drivers import short_lived_driver_env
from tests.scenarios.harness import FAST_JVM
from tests.support.kafka_broker import KafkaEndpoint, create_topic
from tests.support.staged_specs import PARTITIONS as STAGE_PARTITIONS
from tests.support.staged_specs import RECORDS as STAGE_RECORDS
from tests.support.staged_specs import two_stage_spec

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(600), pytest.mark.slow(90)]

PASSWORD_ENV = "BF_E2E_KAFKA_PASSWORD"
RECORDS = 600
#: The driver: every logger at DEBUG, then the CLI (which keeps the root's handler).
DRIVER = ("import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stderr); "
          "from barrierflow.cli.main import main; sys.exit(main(sys.argv[1:]))")


def _forms(secret: str) -> dict[str, bytes]:
    return {"raw": secret.encode(), "base64": base64.b64encode(secret.encode()), "token": secret[4:16].encode()}


def _leaks(secret: str, where: str, data: bytes) -> list[str]:
    found = []
    for form, needle in _forms(secret).items():
        at = data.find(needle)
        if at >= 0:
            found.append(f"password ({form}) in {where}: ...{data[max(0, at - 100):at + 40]!r}...")
    return found


def _run_and_scan(spec: dict[str, object], tmp_path: Path, password: str) -> tuple[list[str], dict[str, int]]:
    """Run ``spec`` to its end in a new driver at DEBUG (the password in its environment); the
    places the password was found, and what was scanned."""
    spec_path = tmp_path / "pipeline.yaml"
    spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    env = {**os.environ, **short_lived_driver_env(), PASSWORD_ENV: password}
    done = subprocess.run([sys.executable, "-c", DRIVER, "run", str(spec_path), "--until-exhausted", "--quiet"],
                          env=env, capture_output=True, timeout=480, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    assert b"Authenticated as" in done.stderr, "the driver's DEBUG log of kafka-python is missing"
    leaks = _leaks(password, "the driver's stdout", done.stdout) + _leaks(password, "the driver's stderr", done.stderr)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        leaks += _leaks(password, str(path.relative_to(tmp_path)), path.read_bytes())
    assert any("offsets" in str(p) for p in files) and any("chk-" in str(p) for p in files)
    return leaks, {"files scanned": len(files), "driver output scanned (bytes)": len(done.stdout) + len(done.stderr)}


def test_a_pipeline_reads_and_writes_over_sasl_scram_and_tls_and_the_password_is_nowhere(
        secured_kafka_endpoint: KafkaEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        figures: dict[str, object]) -> None:
    kafka_endpoint = secured_kafka_endpoint
    secure = kafka_endpoint.secure
    assert secure is not None
    assert len(secure.password) >= 16
    source, out, markers = (f"sec-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("in", "out", "markers"))
    for topic, partitions in ((source, 2), (out, 1), (markers, 1)):
        create_topic(kafka_endpoint, topic, partitions)
    monkeypatch.setenv(PASSWORD_ENV, secure.password)
    client = {"security_protocol": "SASL_SSL", "sasl_mechanism": secure.mechanism, "username": secure.username,
              "password": f"env:{PASSWORD_ENV}", "ssl_cafile": str(secure.ca_pem),
              "options": {"connections.max.idle.ms": 540_000}}
    producer = BatchProducer(ProducerSettings(servers=secure.bootstrap_servers,
                                              client=KafkaClientSpec.model_validate(client)))
    try:
        for i in range(RECORDS):
            producer.send(source, i % 2, json.dumps({"id": i, "name": f"n{i}"}).encode())
        assert producer.settle() == RECORDS
    finally:
        producer.close()

    leaks, scanned = _run_and_scan({
        "version": 1, "name": f"sk{uuid.uuid4().hex[:8]}", "work_dir": str(tmp_path / "work"),
        "sources": [{"name": "events", "type": "kafka", "bootstrap_servers": secure.bootstrap_servers,
                     "topics": [source], "format": "json", "json_fields": {"id": "long", "name": "string"},
                     "max_records_per_batch": 150, "poll_timeout": 10.0, "client": client}],
        "transformation": {"function": "barrierflow.transforms.projection:project",
                           "options": {"columns": {"id": "id", "name": "name"}}},
        "sinks": [{"name": "out", "type": "kafka", "bootstrap_servers": secure.bootstrap_servers, "topic": out,
                   "commit_marker_topic": markers, "key_column": "id", "client": client}],
        "trigger": {"interval": "0s"},
        "checkpoint": {"storage": f"file://{tmp_path / 'checkpoints'}", "interval": "500ms", "timeout": "300s",
                       "tolerable_failed_checkpoints": 5},
        "spark": {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM},
    }, tmp_path, secure.password)

    records = committed_records(secure.bootstrap_servers, out, markers, timeout=30.0,
                                client=KafkaClientSpec.model_validate(client))
    rows = sorted(json.loads(r.value)["id"] for r in records)
    figures.update({"records read and written over SASL_SSL": len(rows), **scanned})
    assert rows == list(range(RECORDS))
    assert not leaks, "\n".join(leaks)


def test_a_two_stage_pipeline_whose_channel_enforces_sasl_scram_and_tls_and_the_password_is_nowhere(
        secured_kafka_endpoint: KafkaEndpoint, tmp_path: Path, figures: dict[str, object]) -> None:
    """Stage ``a`` writes channel ``ab`` (its topic created by the run, through the admin client),
    stage ``b`` reads it: the channel writer's producers run on the executors, the channel source's
    readers on the driver and the executors, all over SASL_SSL."""
    kafka_endpoint = secured_kafka_endpoint
    secure = kafka_endpoint.secure
    assert secure is not None
    spec = two_stage_spec(tmp_path, kafka_endpoint)
    spec["name"] = f"sc{uuid.uuid4().hex[:8]}"
    spec["channels"][0].update({"bootstrap": secure.bootstrap_servers, "client": {
        "security_protocol": "SASL_SSL", "sasl_mechanism": secure.mechanism, "username": secure.username,
        "password": f"env:{PASSWORD_ENV}", "ssl_cafile": str(secure.ca_pem)}})
    spec["spark"] = {"master": "local[2]", "shuffle_partitions": 2, "conf": FAST_JVM}
    leaks, scanned = _run_and_scan(spec, tmp_path, secure.password)

    table = read_committed(f"file://{tmp_path / 'out'}")
    rows = table.to_pylist() if table is not None else []
    figures.update({"rows through the secured channel": len(rows), **scanned})
    assert sorted((r["src_partition"], r["src_offset"]) for r in rows) == [
        (p, o) for p in range(STAGE_PARTITIONS) for o in range(STAGE_RECORDS)]
    assert not leaks, "\n".join(leaks)
