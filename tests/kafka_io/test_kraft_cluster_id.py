"""The embedded broker's cluster id (no broker started)."""

from __future__ import annotations

import uuid

import pytest
from barrierflow.kafka_io import kraft_broker


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id starting with ``-`` (1 random id in 64) made the storage tool read ``-t -...`` as
    an option and formatting failed; such ids are drawn again, as Kafka's ``Uuid.randomUuid``
    does."""
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kraft_broker.uuid, "uuid4", lambda: next(drawn))
    cluster = kraft_broker._cluster_id()
    assert cluster == "AQEBAQEBAQEBAQEBAQEBAQ"
    assert len(cluster) == 22 and not cluster.startswith("-")
