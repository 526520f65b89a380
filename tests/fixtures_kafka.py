"""Session-scoped Kafka broker for tests (Apache Kafka started by the tests, or $BARRIERFLOW_TEST_KAFKA_BOOTSTRAP)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import KafkaEndpoint, running_kafka_broker


@pytest.fixture(scope="session")
def kafka_endpoint() -> Iterator[KafkaEndpoint]:
    """One Kafka broker per test session (per xdist worker); tests create their own topics
    with unique names (see :func:`tests.support.kafka_broker.create_topic`)."""
    with running_kafka_broker() as endpoint:
        logging.getLogger(__name__).warning("Kafka tests run against %s", endpoint.broker)
        yield endpoint
