"""Serving ``/metrics`` over HTTP while a pipeline runs.

:class:`MetricsServer` binds the spec's ``metrics.host`` and ``metrics.port`` (``0``: any free
port) and answers ``GET /metrics`` from a daemon thread with :meth:`RunMetrics.render`; any
other path is 404. The address bound is logged and written to ``<work_dir>/metrics.json``
(``{"host", "port", "url", "pid"}``) for operators and tests; the file is removed when the
server stops.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from barrierflow.atomic_files import write_atomic
from barrierflow.errors import UserInputError
from barrierflow.metrics.exposition import CONTENT_TYPE
from barrierflow.metrics.run_metrics import RunMetrics
from barrierflow.spec.metrics import MetricsSpec

__all__ = ["ADDRESS_FILE", "MetricsServer", "read_address"]

log = logging.getLogger(__name__)

#: The file below the pipeline's work dir that names the address being served.
ADDRESS_FILE = "metrics.json"


def read_address(work_dir: str | os.PathLike[str]) -> dict[str, object] | None:
    """What ``<work_dir>/metrics.json`` says (None: no server is running there)."""
    path = Path(work_dir) / ADDRESS_FILE
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


class MetricsServer:
    """Serves ``metrics`` at ``spec``'s address (module docstring); a context manager."""

    def __init__(self, metrics: RunMetrics, spec: MetricsSpec, *, work_dir: str | os.PathLike[str]) -> None:
        self.metrics = metrics
        self.spec = spec
        self.work_dir = Path(work_dir)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) bound (the free port chosen for ``port: 0``)."""
        if self._server is None:
            raise RuntimeError("the metrics server is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/metrics"

    def start(self) -> MetricsServer:
        """Bind and serve. Raises UserInputError naming the address when it cannot be bound."""
        metrics = self.metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("metrics: " + format, *args)

        try:
            self._server = ThreadingHTTPServer((self.spec.host, self.spec.port), Handler)
        except OSError as exc:
            raise UserInputError(
                f"metrics: cannot serve on {self.spec.host}:{self.spec.port} ({exc.strerror or exc}); choose another "
                "metrics.port in the spec (0 = any free port) or stop what holds it") from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="barrierflow-metrics", daemon=True)
        self._thread.start()
        host, port = self.address
        write_atomic(self.work_dir / ADDRESS_FILE,
                     json.dumps({"host": host, "port": port, "url": self.url, "pid": os.getpid()}))
        log.warning("pipeline %s: serving metrics at %s", metrics.pipeline, self.url)
        return self

    def stop(self) -> None:
        """Stop serving and remove the address file (idempotent)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None
        (self.work_dir / ADDRESS_FILE).unlink(missing_ok=True)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
