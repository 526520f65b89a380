"""Storage fixtures: a fresh S3 bucket per test."""

from __future__ import annotations

import uuid

import pytest
from barrierflow.testing.s3_server import S3Endpoint


@pytest.fixture
def s3_store_uri(s3_endpoint: S3Endpoint) -> str:
    """``s3://BUCKET/some/prefix`` in a bucket created for this test only."""
    bucket = f"bf-test-{uuid.uuid4().hex[:16]}"
    s3_endpoint.create_bucket(bucket)
    return f"s3://{bucket}/some/prefix"
