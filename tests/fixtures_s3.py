"""Session-scoped S3 endpoint for tests (a moto server, or $BARRIERFLOW_TEST_S3_ENDPOINT)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.s3_server import S3Endpoint, running_s3_server

# Variables that could point boto3 elsewhere or add credentials the test server does not know.
_ISOLATE = (
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """One S3 endpoint per test session (per xdist worker).

    Its environment (``AWS_ENDPOINT_URL_S3``, ``AWS_REGION`` and, for a started moto server,
    the ``testing`` credentials) is set in ``os.environ`` for the rest of the session and
    restored afterwards.
    """
    with running_s3_server() as endpoint, pytest.MonkeyPatch.context() as mp:
        if endpoint.access_key_id is not None:
            for name in _ISOLATE:
                mp.delenv(name, raising=False)
        for name, value in endpoint.env().items():
            mp.setenv(name, value)
        yield endpoint


@pytest.fixture
def s3_store_uri(s3_endpoint: S3Endpoint) -> str:
    """``s3://BUCKET/some/prefix`` in a bucket created for this test only."""
    bucket = f"bf-test-{uuid.uuid4().hex[:16]}"
    s3_endpoint.create_bucket(bucket)
    return f"s3://{bucket}/some/prefix"
