"""The test broker's SASL_SSL listener (SCRAM over TLS with a throwaway CA) takes secured clients
of both Kafka client libraries the platform uses, and refuses a wrong password and an untrusted
certificate: what a production cluster's secured listener does."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from tests.support.kafka_broker import KafkaEndpoint, SecureListener

pytestmark = pytest.mark.kafka


@pytest.fixture
def secure(secured_kafka_endpoint: KafkaEndpoint) -> SecureListener:
    assert secured_kafka_endpoint.secure is not None
    return secured_kafka_endpoint.secure


def test_kafka_python_produces_and_reads_over_sasl_scram_and_tls(secure: SecureListener) -> None:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(**secure.kafka_python_options())
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(**secure.kafka_python_options(), acks="all")
    try:
        for i in range(3):
            producer.send(topic, value=f"r{i}".encode(), partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(**secure.kafka_python_options(), group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        while len(got) < 3:
            batch = consumer.poll(timeout_ms=10_000).get(tp, [])
            assert batch, f"no records over SASL_SSL after {got}"
            got += [r.value for r in batch]
    finally:
        consumer.close()
    assert got == [b"r0", b"r1", b"r2"]


def test_librdkafka_reads_metadata_over_sasl_scram_and_tls(secure: SecureListener) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": secure.bootstrap_servers, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": secure.mechanism, "sasl.username": secure.username,
                         "sasl.password": secure.password, "ssl.ca.location": str(secure.ca_pem)})
    metadata = admin.list_topics(timeout=30)
    assert metadata.brokers, "no broker in the metadata answered over SASL_SSL"


def test_a_wrong_password_is_refused(secure: SecureListener) -> None:
    options = {**secure.kafka_python_options(), "sasl_plain_password": "not-" + secure.password,
               "bootstrap_timeout_ms": 5000, "request_timeout_ms": 5000}
    with pytest.raises(KafkaError):
        KafkaAdminClient(**options).list_topics()


def test_a_certificate_the_client_does_not_trust_is_refused(secure: SecureListener, tmp_path) -> None:
    from tests.support.tls import make_ca_and_server_cert

    other_ca = make_ca_and_server_cert(tmp_path / "other").ca_pem
    options = {**secure.kafka_python_options(), "ssl_cafile": str(other_ca),
               "bootstrap_timeout_ms": 5000, "request_timeout_ms": 5000}
    with pytest.raises(KafkaError):
        KafkaAdminClient(**options).list_topics()
