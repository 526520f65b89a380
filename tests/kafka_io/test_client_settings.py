"""One mapping of a ``client`` block to the settings of both Kafka clients (no broker, no Spark):
secrets resolved from the environment or an Airflow connection where the client is built, the
allow-listed options under each client's own names, and failure messages that name the brokers
and the setting but never a secret."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from barrierflow.kafka_io import ConsumerSettings, KafkaSecurityError, ProducerSettings
from barrierflow.kafka_io.security import (
    describe,
    kafka_python_config,
    librdkafka_config,
    resolve_secret,
    security_failure,
)
from barrierflow.kafka_io.transactions import TransactionalSettings
from barrierflow.spec.kafka_client import KafkaClientSpec

SECRET = "pw-S3CR3T-a1b2c3"
SERVERS = "broker-1:9093,broker-2:9093"


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
        files[name] = str(path)
    return files


def _scram(tls_files: dict[str, str], **extra: object) -> KafkaClientSpec:
    return KafkaClientSpec.model_validate({
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "alice",
        "password": "env:BF_TEST_KAFKA_PASSWORD", "ssl_cafile": tls_files["ca"], **extra})


def test_no_client_block_adds_nothing() -> None:
    assert kafka_python_config(None) == {} and librdkafka_config(None) == {}
    assert "security.protocol" not in ConsumerSettings(servers=SERVERS).config()


def test_sasl_scram_over_tls_maps_to_both_clients(tls_files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", SECRET)
    client = _scram(tls_files, ssl_certfile=tls_files["cert"], ssl_keyfile=tls_files["key"],
                    options={"client.rack": "eu-1a", "receive.buffer.bytes": 1 << 20,
                             "ssl.endpoint.identification.algorithm": "none", "socket.keepalive.enable": True})
    assert kafka_python_config(client, "consumer") == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET, "ssl_cafile": tls_files["ca"], "ssl_certfile": tls_files["cert"],
        "ssl_keyfile": tls_files["key"], "client_rack": "eu-1a", "receive_buffer_bytes": 1 << 20,
        "ssl_check_hostname": False}
    # KafkaAdminClient has no client_rack: an allowed option a client lacks is left out, not refused.
    assert "client_rack" not in kafka_python_config(client, "admin")
    assert librdkafka_config(client) == {
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": SECRET, "ssl.ca.location": tls_files["ca"], "ssl.certificate.location": tls_files["cert"],
        "ssl.key.location": tls_files["key"], "client.rack": "eu-1a", "socket.receive.buffer.bytes": 1 << 20,
        "ssl.endpoint.identification.algorithm": "none", "socket.keepalive.enable": True}


def test_every_librdkafka_settings_object_carries_the_client(tls_files: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", SECRET)
    client = _scram(tls_files)
    for settings in (ConsumerSettings(servers=SERVERS, client=client), ProducerSettings(servers=SERVERS, client=client),
                     TransactionalSettings(servers=SERVERS, transactional_id="t", client=client)):
        config = settings.config()
        assert config["sasl.password"] == SECRET and config["security.protocol"] == "sasl_ssl"
        assert SECRET not in repr(settings)  # the settings (pickled to executors) hold the reference only
        assert hash(settings) == hash(type(settings)(**{**settings.__dict__}))
    assert ConsumerSettings(servers=SERVERS, client=client).config()["isolation.level"] == "read_committed"


def test_tls_without_a_ca_file_uses_the_systems_cas(monkeypatch: pytest.MonkeyPatch) -> None:
    client = KafkaClientSpec(security_protocol="SSL")
    assert librdkafka_config(client) == {"security.protocol": "ssl", "ssl.ca.location": "probe"}
    assert kafka_python_config(client) == {"security_protocol": "SSL"}


def test_an_unset_variable_or_a_missing_tls_file_names_the_setting(tls_files: dict[str, str], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BF_TEST_KAFKA_PASSWORD", raising=False)
    with pytest.raises(KafkaSecurityError, match="password 'env:BF_TEST_KAFKA_PASSWORD': environment variable "
                                                 "BF_TEST_KAFKA_PASSWORD is not set"):
        librdkafka_config(_scram(tls_files))
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", SECRET)
    missing = KafkaClientSpec(security_protocol="SSL", ssl_cafile=str(tmp_path / "nope.pem"))
    with pytest.raises(KafkaSecurityError, match=r"ssl_cafile .*nope\.pem: no such readable file"):
        kafka_python_config(missing)


def test_an_airflow_connection_gives_the_password_and_the_login(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    if "airflow" not in sys.modules:  # Airflow reads its configuration once, on import
        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("AIRFLOW_CONN_BF_TEST_KAFKA", json.dumps({"conn_type": "generic", "login": "carol",
                                                                 "password": SECRET}))
    client = KafkaClientSpec(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             password="airflow:bf_test_kafka")
    config = librdkafka_config(client)
    assert (config["sasl.username"], config["sasl.password"]) == ("carol", SECRET)
    with pytest.raises(KafkaSecurityError, match="Airflow connection 'bf_nowhere' is not defined") as caught:
        resolve_secret("airflow:bf_nowhere", field="password")
    assert "AIRFLOW_CONN_BF_NOWHERE" in str(caught.value)


@pytest.mark.parametrize(("detail", "expected"), [
    # kafka-python's log line and librdkafka's error callback text of a wrong password
    ("SaslAuthenticationFailedError: Authentication failed during authentication due to invalid credentials with "
     "SASL mechanism SCRAM-SHA-512", "authentication failed for user 'alice' on brokers broker-1:9093,broker-2:9093 "
                                     "(security_protocol SASL_SSL, sasl_mechanism SCRAM-SHA-512"),
    ("sasl_ssl://broker-1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify "
     "failed: broker certificate could not be verified", "the TLS certificate of brokers broker-1:9093,broker-2:9093 "
                                                         "is not trusted: ssl_cafile "),
    ("KafkaConnectionError: Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: IP "
     "address mismatch, certificate is not valid for '10.0.0.1'", "does not name the host connected to"),
    ("SaslHandshake failed: UnsupportedSaslMechanismError", "do not offer sasl_mechanism SCRAM-SHA-512"),
    ("Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration",
     "do not speak security_protocol SASL_SSL on that port"),
    ("SSL handshake failed: error:0A000412:SSL routines::sslv3 alert bad certificate", "refused the client's TLS "
                                                                                       "certificate"),
])
def test_security_failures_name_the_brokers_and_the_setting(tls_files: dict[str, str], detail: str, expected: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", SECRET)
    found = security_failure(_scram(tls_files), SERVERS, detail)
    assert found is not None and expected in str(found)
    assert SECRET not in str(found)
    if "authentication failed" in expected:
        assert "check the password in environment variable BF_TEST_KAFKA_PASSWORD" in str(found)


def test_other_failures_are_not_taken_for_security(tls_files: dict[str, str]) -> None:
    client = _scram(tls_files)
    assert security_failure(client, SERVERS, "KafkaTimeoutError: Unable to bootstrap from broker-1:9093") is None
    assert security_failure(client, SERVERS, "Connect to ipv4#10.0.0.1:9093 failed: Connection refused") is None
    assert describe(None) == "security_protocol PLAINTEXT"
    assert "password" not in describe(client)


def test_a_resolved_secret_is_concealed_in_every_log_record(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    secret = "pl'ain-S3CR3T-log"  # a quote: the repr of bytes escapes it
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", secret)
    client = KafkaClientSpec(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u",
                             password="env:BF_TEST_KAFKA_PASSWORD")
    librdkafka_config(client)
    caplog.set_level(logging.DEBUG)
    # What kafka-python logs at DEBUG: its admin client's configuration, a SASL/PLAIN request's bytes.
    logging.getLogger("kafka.admin.client").debug("Starting KafkaAdminClient with configuration: %s",
                                                  {"sasl_plain_password": secret})
    logging.getLogger("kafka.protocol.parser").debug("Send: %r", bytearray(b"\x00u\x00" + secret.encode()))
    try:
        raise ValueError(f"Unrecognized configs: {{'sasl_plain_password': {secret!r}}}")
    except ValueError:
        logging.getLogger("kafka.producer").exception("failed")
    assert caplog.text.count("***") >= 3
    assert "S3CR3T" not in caplog.text


class _ExceptionObjectFormatter(logging.Formatter):
    """A structured formatter's way with exceptions: it renders the exception object (its str and
    its cause), not the record's formatted traceback text."""

    def format(self, record: logging.LogRecord) -> str:
        rendered = {"msg": record.getMessage()}
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            rendered["exception"] = f"{error} (cause: {error.__cause__})"
        return json.dumps(rendered)


def test_a_secret_in_a_logged_exception_is_concealed_for_formatters_that_render_the_exception_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "pl'ain-S3CR3T-json"
    monkeypatch.setenv("BF_TEST_KAFKA_PASSWORD", secret)
    librdkafka_config(KafkaClientSpec(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u",
                                      password="env:BF_TEST_KAFKA_PASSWORD"))
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(_ExceptionObjectFormatter())
    logger = logging.getLogger("kafka.producer.structured-test")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            try:
                raise KeyError(secret)
            except KeyError as inner:
                raise ValueError(f"Unrecognized configs: {{'sasl_plain_password': {secret!r}}}") from inner
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert len(lines) == 1 and "***" in lines[0]
    assert "S3CR3T" not in lines[0]
