"""A bandwidth-limited TCP link in front of an endpoint: a remote object store, emulated.

The ABS paper's claim is that an asynchronous snapshot costs almost nothing while a
synchronous one stalls processing for as long as the upload takes. Against an S3 endpoint on
loopback (moto) an upload of 20 MB takes 0.1-0.25 s and neither costs anything measurable
(docs/benchmarks.md). A real object store is farther away: :class:`ThrottledLink` relays TCP
connections from ``127.0.0.1:<port>`` to the real endpoint and limits the bytes per second in
each direction (one token bucket per direction, shared by all connections, like one network
link), so every request still goes through real HTTP to the real server, only slower.

Contract:

* Bytes are relayed unchanged and in order per connection; closing either side closes both.
* Over any span the link forwards at most ``rate * span + burst`` bytes per direction
  (:class:`TokenBucket`); ``rate=None`` forwards as fast as the sockets go.
* :meth:`ThrottledLink.set_rate` changes the limit for all connections at once (a benchmark
  runs several modes over one link).
* ``nice`` > 0 runs the relay's threads that many steps below the creating thread's CPU
  priority (:func:`~barrierflow.checkpointing.thread_priority.lower_calling_thread`): the link
  stands for network hardware, which on a real deployment takes no CPU from processing, so the
  benchmark gives it only what processing leaves, like the emulated store (moto at nice 19).

Only for benchmarks and tests: it binds to 127.0.0.1 and logs nothing it relays.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from types import TracebackType
from urllib.parse import urlsplit

from barrierflow.checkpointing.thread_priority import lower_calling_thread
from barrierflow.errors import UserInputError

log = logging.getLogger(__name__)

#: Bytes read from a socket at a time. Each chunk costs a few Python calls in the benchmark's
#: own process, so the emulated network's CPU falls with the chunk size (100 MB at 20 MB/s:
#: relay and client 0.46 core-s with 16 KiB chunks, 0.32 with 256 KiB); 256 KiB is 13 ms of
#: the link at 20 MB/s and 51 ms at 5 MB/s, still smooth next to uploads of seconds.
CHUNK = 256 * 1024
#: The token bucket's burst: how far ahead of its rate the link may get after a pause.
BURST = 64 * 1024
MEGABYTE = 1_000_000


class TokenBucket:
    """At most ``rate`` bytes per second on average, with bursts up to ``burst`` bytes.

    :meth:`take` reserves the bytes at once (the balance may go negative) and then waits
    until the balance would have been refilled, so concurrent callers share the rate fairly
    in arrival order. ``rate=None`` never waits.
    """

    def __init__(self, rate: float | None, burst: int = BURST) -> None:
        self._lock = threading.Lock()
        self._rate = rate
        self._burst = burst
        self._balance = float(burst)
        self._last = time.monotonic()

    def set_rate(self, rate: float | None) -> None:
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be positive or None, got {rate}")
        with self._lock:
            self._rate = rate
            self._balance = float(self._burst)
            self._last = time.monotonic()

    def take(self, size: int) -> float:
        """Reserve ``size`` bytes; returns the seconds waited for them."""
        with self._lock:
            rate = self._rate
            if rate is None:
                return 0.0
            now = time.monotonic()
            self._balance = min(float(self._burst), self._balance + (now - self._last) * rate)
            self._last = now
            self._balance -= size
            wait = -self._balance / rate if self._balance < 0 else 0.0
        if wait > 0:
            time.sleep(wait)  # the throttle itself: this is how a slow link behaves
        return wait


class ThrottledLink:
    """A TCP relay from ``127.0.0.1:<port>`` to ``upstream`` (``http://host:port``), limited to
    ``megabytes_per_second`` (10^6 bytes) in each direction; ``None``: unlimited.

    Use as a context manager; :attr:`url` is the address to give clients instead of the
    upstream's.
    """

    def __init__(self, upstream: str, megabytes_per_second: float | None = None, nice: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserInputError(f"a throttled link needs an endpoint URL such as http://127.0.0.1:5000, got "
                                 f"{upstream!r}")
        self.scheme = parts.scheme
        self.upstream = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        rate = _bytes_per_second(megabytes_per_second)
        self._buckets = (TokenBucket(rate), TokenBucket(rate))  # client -> upstream, upstream -> client
        self.nice = nice
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._sockets_lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name=f"throttled-link-{self.port}-accept",
                                          daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def set_rate(self, megabytes_per_second: float | None) -> None:
        """Limit both directions to ``megabytes_per_second`` from now on (None: unlimited)."""
        for bucket in self._buckets:
            bucket.set_rate(_bytes_per_second(megabytes_per_second))

    def start(self) -> ThrottledLink:
        self._acceptor.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        with self._sockets_lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            _close(sock)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> ThrottledLink:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _accept(self) -> None:
        lower_calling_thread(self.nice)  # threads it starts inherit its nice value
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
                upstream.settimeout(None)
            except OSError as exc:
                log.warning("throttled link: cannot reach %s:%d: %s", *self.upstream, exc)
                _close(client)
                continue
            with self._sockets_lock:
                self._sockets |= {client, upstream}
            for source, target, bucket in ((client, upstream, self._buckets[0]),
                                           (upstream, client, self._buckets[1])):
                threading.Thread(target=self._pump, args=(source, target, bucket), daemon=True,
                                 name=f"throttled-link-{self.port}-pump").start()

    def _pump(self, source: socket.socket, target: socket.socket, bucket: TokenBucket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                bucket.take(len(data))
                target.sendall(data)
        except OSError:
            pass  # the other side went away
        finally:
            for sock in (source, target):
                _close(sock)
                with self._sockets_lock:
                    self._sockets.discard(sock)


def _bytes_per_second(megabytes_per_second: float | None) -> float | None:
    if megabytes_per_second is None:
        return None
    if megabytes_per_second <= 0:
        raise UserInputError(f"a link's bandwidth must be positive (MB/s), got {megabytes_per_second}")
    return megabytes_per_second * MEGABYTE


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
