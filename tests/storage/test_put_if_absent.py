"""put_if_absent on every backend (local directory, S3 on a moto server): created once,
never overwritten, exactly one winner among concurrent writers; S3 endpoints that ignore or
reject If-None-Match are refused by the probe, naming the endpoint and the fix."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from barrierflow.local_ports import free_port
from barrierflow.storage import ConditionalWriteUnsupportedError
from barrierflow.storage.local import LocalObjectStore
from barrierflow.storage.object_store import ObjectStore
from barrierflow.storage.s3 import S3ObjectStore
from barrierflow.storage.uri import open_store


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        root = tmp_path / "store"
        return LocalObjectStore(root, uri=f"file://{root}")
    backend = open_store(request.getfixturevalue("s3_store_uri"))
    assert isinstance(backend, S3ObjectStore)
    return backend


def test_creates_once_and_never_overwrites(store: ObjectStore) -> None:
    assert store.put_if_absent("lease/fence-1.json", b"first") is True
    assert store.put_if_absent("lease/fence-1.json", b"second") is False
    assert store.get_bytes("lease/fence-1.json") == b"first"
    assert [o.key for o in store.list("lease/")] == ["lease/fence-1.json"]  # no temporary file left listed
    store.check_conditional_writes("_lease/probe")  # moto and local files honour it
    assert not store.exists("_lease/probe")


def test_concurrent_writers_exactly_one_wins(store: ObjectStore) -> None:
    results: dict[int, bool] = {}
    start = threading.Barrier(8)

    def write(i: int) -> None:
        start.wait()
        results[i] = store.put_if_absent("race.json", str(i).encode())

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert store.get_bytes("race.json") == str(winners[0]).encode()


class _Proxy(BaseHTTPRequestHandler):
    """Forwards S3 requests to moto, misbehaving on conditional PUTs as ``mode`` says:
    ``ignore`` drops If-None-Match (an endpoint that silently overwrites), ``reject``
    answers 501 NotImplemented."""

    upstream = ""
    mode = "ignore"

    def log_message(self, *args: object) -> None:
        return None

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conditional = self.headers.get("If-None-Match") is not None
        if conditional and self.command == "PUT" and self.mode == "reject":
            payload = (b"<?xml version='1.0'?><Error><Code>NotImplemented</Code>"
                       b"<Message>conditional writes are not implemented</Message></Error>")
            self.send_response(501)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("if-none-match", "host")}
        target = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
        conn.request(self.command, self.path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward


@pytest.fixture(params=["ignore", "reject"])
def misbehaving_endpoint(request: pytest.FixtureRequest, s3_store_uri: str,
                         monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import os

    upstream = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ["AWS_ENDPOINT_URL"]
    handler = type("Proxy", (_Proxy,), {"upstream": upstream, "mode": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{server.server_address[1]}")
    yield request.param
    server.shutdown()
    server.server_close()


@pytest.mark.s3
def test_endpoint_without_conditional_writes_is_refused_naming_it(misbehaving_endpoint: str,
                                                                   s3_store_uri: str) -> None:
    backend = open_store(s3_store_uri)
    import os

    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
    with pytest.raises(ConditionalWriteUnsupportedError) as info:
        backend.check_conditional_writes("_lease/probe")
    message = str(info.value)
    assert endpoint in message and "If-None-Match" in message and "file://" in message
    if misbehaving_endpoint == "ignore":
        assert "overwrote" in message
        assert not backend.exists("_lease/probe")
    else:
        assert "NotImplemented" in message
