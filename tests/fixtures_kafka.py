"""Session-scoped Kafka broker for tests (Apache Kafka started by the tests, or $BARRIERFLOW_TEST_KAFKA_BOOTSTRAP)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import EXTERNAL_BOOTSTRAP_ENV, KafkaEndpoint, kafka_version, running_kafka_broker


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
