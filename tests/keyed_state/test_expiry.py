"""The expiry rule: a key last updated at t expires once the watermark is at or past t + ttl."""

from __future__ import annotations

from barrierflow.keyed_state import EventTimeTTL


def test_a_key_expires_when_the_watermark_reaches_its_last_update_plus_the_ttl() -> None:
    ttl = EventTimeTTL.from_seconds(60, emit_on_expiry=True)
    assert (ttl.ttl_ms, ttl.emit_on_expiry) == (60_000, True)
    assert ttl.expiry_ms(1_000) == 61_000
    assert not ttl.expired(1_000, 60_999)
    assert ttl.expired(1_000, 61_000) and ttl.expired(1_000, 90_000)


def test_without_a_ttl_nothing_expires() -> None:
    forever = EventTimeTTL.from_seconds(None)
    assert forever.expiry_ms(1_000) is None
    assert not forever.expired(0, 10**15)
