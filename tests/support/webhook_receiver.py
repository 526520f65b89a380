"""A real HTTP endpoint on 127.0.0.1 for alert webhooks: :class:`WebhookReceiver` records every
POST (path, headers, JSON body) and answers with a status the test chooses; :func:`silent_endpoint`
is a port that accepts connections and never answers (a hung endpoint)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from barrierflow.local_ports import free_port


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class WebhookReceiver:
    """An HTTP server in a thread; ``url`` ends in a secret-looking path, as a Slack hook does."""

    def __init__(self, status: int = 200, path: str = "/services/T0/B0/S3CR3T-hook-token") -> None:
        self.status = status
        self.path = path
        self.received: list[Received] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver._arrived:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                    receiver._arrived.notify_all()
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="webhook-receiver")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.path}"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The first ``count`` requests, once they arrived (AssertionError after ``timeout`` s)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(f"{len(self.received)} webhook request(s) arrived, expected {count}")
            return list(self.received[:count])

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """The URL of a listening port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", free_port()))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"


def closed_port_url() -> str:
    """The URL of a port nothing listens on (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}/hook"
