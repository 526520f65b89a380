"""Session-scoped PostgreSQL for tests (a throwaway server, or $BARRIERFLOW_TEST_POSTGRES_DSN)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres_server import PostgresEndpoint, running_postgres


@pytest.fixture(scope="session")
def postgres_endpoint() -> Iterator[PostgresEndpoint]:
    """One PostgreSQL database per test session (per xdist worker) that allows prepared
    transactions; tests use their own table and pipeline names so they never collide."""
    with running_postgres() as endpoint:
        yield endpoint
