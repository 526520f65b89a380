"""The broker launcher's cluster ids are ones ``kafka-storage format -t ID`` takes."""

from __future__ import annotations

import uuid

import pytest
from barrierflow.kafka_io import kraft_broker


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8 encodes to '-' as the first base64url character: the id kafka-storage's parser took
    # for an option. The launcher draws again instead.
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" + bytes(15))])
    monkeypatch.setattr(kraft_broker.uuid, "uuid4", lambda: next(draws))
    found = kraft_broker._cluster_id()
    assert not found.startswith("-")
    assert found == "AQAAAAAAAAAAAAAAAAAAAA"
