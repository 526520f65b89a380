"""Session-scoped Kafka broker for tests (Apache Kafka started by the tests, or $BARRIERFLOW_TEST_KAFKA_BOOTSTRAP)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import (
    EXTERNAL_BOOTSTRAP_ENV,
    KafkaEndpoint,
    kafka_version,
    own_kafka_broker,
    running_kafka_broker,
)


def pytest_report_header(config: pytest.Config) -> str:
    """The first lines of every run say which Kafka the Kafka tests use."""
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        return f"kafka: the external cluster at {external} (${EXTERNAL_BOOTSTRAP_ENV})"
    return f"kafka: Apache Kafka {kafka_version()} (KRaft, one node per test worker, started by the tests)"


@pytest.fixture(scope="session")
def kafka_endpoint() -> Iterator[KafkaEndpoint]:
    """One Kafka broker per test session (per xdist worker); tests create their own topics
    with unique names (see :func:`tests.support.kafka_broker.create_topic`)."""
    with running_kafka_broker() as endpoint:
        logging.getLogger(__name__).warning("Kafka tests run against %s", endpoint.broker)
        yield endpoint


@pytest.fixture(scope="session")
def secured_kafka_endpoint(kafka_endpoint: KafkaEndpoint) -> Iterator[KafkaEndpoint]:
    """A Kafka broker with a SASL_SSL listener: the session's broker when it has one (always, for
    the broker the tests start; an external cluster when its ``BARRIERFLOW_TEST_KAFKA_SASL_SSL_*``
    variables name one), else an Apache Kafka of its own started for the secured tests, never a skip."""
    if kafka_endpoint.secure is not None:
        yield kafka_endpoint
        return
    with own_kafka_broker() as endpoint:
        yield endpoint
