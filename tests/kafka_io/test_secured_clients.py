"""Every client barrierflow builds connects over SASL/SCRAM and TLS when its spec's ``client`` block
says so, against the test broker's SASL_SSL listener, which enforces both: the Kafka source's
(metadata and offsets with kafka-python, ranges with librdkafka), the channel's (topic creation,
the batch producer) and the Kafka sink's (the transactional producer, the marker reader). A
wrong password and an untrusted CA fail at once (not after the source's outage bound) with an
error naming the brokers and the setting, and neither the password nor the wrong one appears in
an error or a log record."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from barrierflow.errors import SinkError, SourceError, SourceUnavailableError
from barrierflow.kafka_io import BatchProducer, KafkaSecurityError, ProducerSettings
from barrierflow.kafka_io.admin import end_offsets, ensure_topic, open_consumer
from barrierflow.kafka_io.committed_output import partition_numbers
from barrierflow.kafka_io.range_reads import read_range
from barrierflow.kafka_io.security import (
    FIRST_BOOTSTRAP_SECONDS,
    connect_kafka_python,
    kafka_python_config,
    kafka_python_failure,
)
from barrierflow.kafka_io.transactions import TransactionalProducer, TransactionalSettings, TransactionSecurityError
from barrierflow.local_ports import free_port
from barrierflow.spec.kafka_client import KafkaClientSpec
from barrierflow.spec.models import KafkaSourceSpec

from tests.support.kafka_broker import KafkaEndpoint, SecureListener

pytestmark = pytest.mark.kafka

PASSWORD_ENV = "BF_TEST_KAFKA_PASSWORD"
WRONG = "wrong-S3CR3T-9f8e7d"
@pytest.fixture
def secure(secured_kafka_endpoint: KafkaEndpoint) -> SecureListener:
    assert secured_kafka_endpoint.secure is not None
    return secured_kafka_endpoint.secure


def _client(secure: SecureListener, ca: Path | None = None) -> KafkaClientSpec:
    return KafkaClientSpec(security_protocol="SASL_SSL", sasl_mechanism=secure.mechanism, username=secure.username,
                           password=f"env:{PASSWORD_ENV}", ssl_cafile=str(ca or secure.ca_pem))


def _source(secure: SecureListener, topic: str, client: KafkaClientSpec) -> KafkaSourceSpec:
    # A name of its own: a process keeps one range reader per settings (the name is its client id),
    # and a reader built with the right password must not serve the wrong-password test.
    return KafkaSourceSpec(name=f"secured-{uuid.uuid4().hex[:6]}", type="kafka",
                           bootstrap_servers=secure.bootstrap_servers, topics=[topic], client=client,
                           poll_timeout=2.0, unavailable_timeout=120.0)


def _without_secrets(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text


def test_source_channel_and_sink_clients_read_and_write_over_sasl_scram_and_tls(
        secure: SecureListener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSWORD_ENV, secure.password)
    client = _client(secure)
    topic, out = f"sec-in-{uuid.uuid4().hex[:8]}", f"sec-out-{uuid.uuid4().hex[:8]}"
    ensure_topic(secure.bootstrap_servers, topic, 2, client)  # the channel's admin (kafka-python)
    ensure_topic(secure.bootstrap_servers, out, 1, client)

    producer = BatchProducer(ProducerSettings(servers=secure.bootstrap_servers, client=client))  # channel writer
    try:
        assert producer.partitions(topic) == [0, 1]
        for i in range(6):
            producer.send(topic, i % 2, f'{{"i": {i}}}'.encode())
        assert producer.settle() == 6
    finally:
        producer.close()

    spec = _source(secure, topic, client)
    assert end_offsets(spec) == {f"{topic}:0": 3, f"{topic}:1": 3}  # kafka-python metadata and offsets
    assert [r.value for r in read_range(spec, topic, 1, 0, 3)] == [b'{"i": 1}', b'{"i": 3}', b'{"i": 5}']

    sink = TransactionalProducer(TransactionalSettings(servers=secure.bootstrap_servers,  # the Kafka sink
                                                       transactional_id=f"bf.sec.{uuid.uuid4().hex[:8]}",
                                                       timeout=10.0, client=client))
    try:
        sink.begin()
        sink.send(out, b'{"done": true}', key=b"k")
        assert sink.settle() == {0: (0, 0)}
        sink.commit()
    finally:
        sink.close()
    assert partition_numbers([secure.bootstrap_servers], out, client=client) == [0]  # the sink's marker reader
    assert [r.value for r in read_range(_source(secure, out, client), out, 0, 0, 2)] == [b'{"done": true}']
    # kafka-python's admin client logs its configuration at DEBUG: the password is concealed there.
    assert "'sasl_plain_password': '***'" in caplog.text
    _without_secrets(caplog.text, secure.password)


def test_a_wrong_password_fails_at_once_naming_the_brokers_the_user_and_the_variable(
        secure: SecureListener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSWORD_ENV, secure.password)
    topic = f"sec-pw-{uuid.uuid4().hex[:8]}"
    ensure_topic(secure.bootstrap_servers, topic, 1, _client(secure))
    monkeypatch.setenv(PASSWORD_ENV, WRONG)
    client = _client(secure)
    spec = _source(secure, topic, client)
    expected = (f"authentication failed for user '{secure.username}' on brokers {secure.bootstrap_servers} "
                f"(security_protocol SASL_SSL, sasl_mechanism {secure.mechanism}")
    hint = f"check the password in environment variable {PASSWORD_ENV}"
    messages = []

    with pytest.raises(SourceError) as caught:  # kafka-python: the source's metadata and offsets
        open_consumer(spec)
    assert not isinstance(caught.value, SourceUnavailableError), "a refused login is not an outage to ride out"
    messages.append(str(caught.value))
    with pytest.raises(SourceError) as caught:  # librdkafka: the source's range reads, on the executors
        list(read_range(spec, topic, 0, 0, 1))
    assert not isinstance(caught.value, SourceUnavailableError), "a refused login is not an outage to ride out"
    messages.append(str(caught.value))
    with pytest.raises(KafkaSecurityError) as caught:  # librdkafka: the channel writer
        BatchProducer(ProducerSettings(servers=secure.bootstrap_servers, client=client)).partitions(topic)
    messages.append(str(caught.value))
    with pytest.raises(TransactionSecurityError) as caught:  # librdkafka: the Kafka sink
        TransactionalProducer(TransactionalSettings(servers=secure.bootstrap_servers, transactional_id="bf.sec.pw",
                                                    timeout=5.0, client=client))
    messages.append(str(caught.value))
    with pytest.raises(SinkError) as caught:  # kafka-python: the channel's topic creation
        ensure_topic(secure.bootstrap_servers, topic, 1, client)
    messages.append(str(caught.value))
    for message in messages:
        assert expected in message and hint in message, message
        _without_secrets(message, WRONG, secure.password)
    _without_secrets(caplog.text, WRONG, secure.password)


def test_an_untrusted_ca_fails_at_once_naming_the_brokers_and_ssl_cafile(
        secure: SecureListener, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    from tests.support.tls import make_ca_and_server_cert

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSWORD_ENV, secure.password)
    other_ca = make_ca_and_server_cert(tmp_path / "other").ca_pem
    client = _client(secure, other_ca)
    topic = f"sec-ca-{uuid.uuid4().hex[:8]}"
    ensure_topic(secure.bootstrap_servers, topic, 1, _client(secure))
    spec = _source(secure, topic, client)
    expected = f"the TLS certificate of brokers {secure.bootstrap_servers} is not trusted: ssl_cafile {other_ca}"
    messages = []

    with pytest.raises(SourceError) as caught:
        open_consumer(spec)
    assert not isinstance(caught.value, SourceUnavailableError)
    messages.append(str(caught.value))
    with pytest.raises(SourceError) as caught:
        list(read_range(spec, topic, 0, 0, 1))
    assert not isinstance(caught.value, SourceUnavailableError), "a refused login is not an outage to ride out"
    messages.append(str(caught.value))
    with pytest.raises(KafkaSecurityError) as caught:
        BatchProducer(ProducerSettings(servers=secure.bootstrap_servers, client=client)).partitions(topic)
    messages.append(str(caught.value))
    for message in messages:
        assert expected in message, message
        _without_secrets(message, secure.password)
    _without_secrets(caplog.text, secure.password)


def test_a_refused_login_ends_a_secured_bootstrap_after_its_first_short_attempt(
        secure: SecureListener, monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python retries a refused login until its bootstrap timeout and then says only that it
    timed out. A secured client's first bootstrap is short; librdkafka then finds the login
    refused, and that is the error: one attempt, not another for the rest of a 60 s timeout."""
    from kafka import KafkaConsumer

    monkeypatch.setenv(PASSWORD_ENV, WRONG)
    client = _client(secure)
    attempts: list[int] = []

    def connect(bootstrap_ms: int) -> KafkaConsumer:
        attempts.append(bootstrap_ms)
        return KafkaConsumer(bootstrap_servers=[secure.bootstrap_servers], bootstrap_timeout_ms=bootstrap_ms,
                             **kafka_python_config(client, "consumer"))

    with pytest.raises(KafkaSecurityError, match="authentication failed for user"):
        connect_kafka_python(connect, client, secure.bootstrap_servers, 60.0)
    assert attempts == [int(FIRST_BOOTSTRAP_SECONDS * 1000)]


def test_a_secured_bootstrap_that_fails_for_no_security_reason_gets_the_rest_of_its_timeout(
        secure: SecureListener, monkeypatch: pytest.MonkeyPatch) -> None:
    """Brokers that do not answer (a port nobody listens on) are no security failure: after the
    short first bootstrap the client tries again for what is left of its timeout, and the
    caller gets kafka-python's timeout, as without the first attempt. A PLAINTEXT client
    bootstraps once, for its whole timeout."""

    from kafka.errors import KafkaTimeoutError

    monkeypatch.setenv(PASSWORD_ENV, secure.password)
    closed = f"127.0.0.1:{free_port()}"
    attempts: list[int] = []

    def connect(bootstrap_ms: int) -> object:
        attempts.append(bootstrap_ms)
        raise KafkaTimeoutError(f"Unable to bootstrap from {closed}")

    from barrierflow.kafka_io import security

    asked: list[str] = []
    diagnose = security.diagnose
    monkeypatch.setattr(security, "diagnose", lambda *a, **k: asked.append(a[1]) or diagnose(*a, **k))
    with pytest.raises(KafkaTimeoutError) as timed_out:
        connect_kafka_python(connect, _client(secure), closed, 4.0)
    # The caller's translation of the timeout does not ask the brokers a second time.
    assert kafka_python_failure(_client(secure), closed, timed_out.value, 4.0) is None
    assert asked == [closed]
    assert len(attempts) == 2 and attempts[0] == int(FIRST_BOOTSTRAP_SECONDS * 1000), attempts
    assert 1000 <= attempts[1] <= 4000, attempts  # what the clock says is left of the 4 s
    attempts.clear()
    with pytest.raises(KafkaTimeoutError):
        connect_kafka_python(connect, None, closed, 60.0)
    assert attempts == [60_000]
