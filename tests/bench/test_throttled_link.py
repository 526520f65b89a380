"""The throttled link of the S3 benchmark (bench/throttled_link.py), against the test's moto server.

What it must do for the benchmark to mean anything: relay real S3 traffic unchanged, and never
forward faster than its limit. The second is a lower bound on elapsed time (bytes / rate,
minus the burst), which a slow machine can only make longer, so it cannot fail from load.
"""

from __future__ import annotations

import os
import time

import pytest
from barrierflow.errors import UserInputError
from barrierflow.storage import open_store

from bench.run import main
from bench.throttled_link import BURST, MEGABYTE, ThrottledLink, TokenBucket


def test_objects_pass_through_unchanged_and_no_faster_than_the_limit(s3_store_uri: str) -> None:
    payload = os.urandom(600_000)
    rate = 1.0  # MB/s
    with ThrottledLink(os.environ["AWS_ENDPOINT_URL_S3"], rate) as link, pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ENDPOINT_URL_S3", link.url)
        store = open_store(s3_store_uri)
        started = time.monotonic()
        store.put_bytes("big.bin", payload)
        upload_seconds = time.monotonic() - started
        assert store.get_bytes("big.bin") == payload

        link.set_rate(None)  # unthrottled: the same traffic still goes through
        store.put_bytes("again.bin", payload[::-1])
        assert store.get_bytes("again.bin") == payload[::-1]
    # 600 kB at 1 MB/s, less the bucket's burst: at least 0.53 s, whatever the machine.
    assert upload_seconds >= (len(payload) - BURST) / (rate * MEGABYTE)


def test_token_bucket_shares_its_rate_between_callers() -> None:
    bucket = TokenBucket(rate=1_000_000, burst=0)
    waited = sum(bucket.take(100_000) for _ in range(5))
    # 500 kB reserved at 1 MB/s: the waits add up to at least 0.5 s less the first call's start.
    assert waited >= 0.5 - 0.1 - 1e-3


def test_bad_endpoints_and_bandwidths_are_refused() -> None:
    with pytest.raises(UserInputError, match="endpoint URL"):
        ThrottledLink("127.0.0.1:9000")
    with pytest.raises(UserInputError, match="bandwidth must be positive"):
        ThrottledLink("http://127.0.0.1:9000", 0)


def test_bench_refuses_a_store_bandwidth_without_an_s3_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store-bandwidth", "5"]) == 2
    assert "--store s3://" in capsys.readouterr().err
    assert main(["--store", "s3://b/p", "--store-bandwidth", "0"]) == 2
    assert "positive" in capsys.readouterr().err


def test_relay_threads_run_at_the_links_lower_priority(s3_store_uri: str) -> None:
    import socket
    import threading

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with ThrottledLink(os.environ["AWS_ENDPOINT_URL_S3"], None, nice=7) as link, \
            socket.create_connection(("127.0.0.1", link.port)) as held:  # keeps its two pumps alive
        mine = f"throttled-link-{link.port}-"
        deadline = time.monotonic() + 30
        while True:  # the acceptor starts the pumps once it connected upstream
            relay = [t for t in threading.enumerate() if t.name.startswith(mine)]
            if len(relay) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        nice = {os.getpriority(os.PRIO_PROCESS, t.native_id) for t in relay if t.native_id is not None}
        assert held.fileno() >= 0
    assert len(relay) == 3  # the acceptor and the connection's two pumps
    assert nice == {min(19, before + 7)}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the caller keeps its own
