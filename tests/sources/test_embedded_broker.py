"""The embedded broker of ``bootstrap: embedded`` channels: a real tansu on 127.0.0.1."""

from __future__ import annotations

from barrierflow.sources.embedded_broker import broker_answers, embedded_broker


def test_embedded_broker_answers_on_loopback_while_open_and_is_stopped_after() -> None:
    with embedded_broker() as address:
        host, port = address.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert broker_answers(address, timeout=2.0)
    assert not broker_answers(address, timeout=1.0)
