"""TCP ports for the servers barrierflow starts on this machine: the embedded Kafka broker, the
throwaway PostgreSQL of :mod:`barrierflow.testing`, and the servers of its own tests.

Why not ``bind(("127.0.0.1", 0))``: the kernel answers that from its ephemeral range, the same
range it draws from for every other ``bind(0)`` and every outgoing connection. Once a server on
such a port stops, a client still reconnecting to it (a producer that outlives its broker, a
test that points a client at a dead broker on purpose) reaches whatever socket the kernel gives
that number next: for instance the one-connection state server a Spark task opens for its Python
worker, whose accept queue the stray client fills until the worker's own connect times out.

So :func:`free_port` picks below the ephemeral range (on Linux, read from
``/proc/sys/net/ipv4/ip_local_port_range``), where the only sockets are the ones chosen
explicitly. Within a process it never hands out a port twice, so a port a stopped server leaves
behind stays empty; processes start from random points, so two rarely pick the same port. A
picked port is still only free at the moment of the pick: starters bind it promptly and retry on
another port if that fails. Without the range file (not Linux) or with no room below the range,
the kernel picks (``bind(0)``). It imports nothing of barrierflow, so every layer may use it."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Sequence

#: Where Linux states its ephemeral port range ("low high").
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: The lowest port handed out (below: the registered ports of well-known services).
LOWEST_PORT = 10000
#: Candidates tried before falling back to a port of the kernel's choosing.
ATTEMPTS = 200

_lock = threading.Lock()
_handed_out: set[int] = set()
_random = random.SystemRandom()


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range ``(low, high)``, both included; None if unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    return low, high


def chosen_range(path: str = EPHEMERAL_RANGE_FILE) -> range | None:
    """The ports :func:`free_port` picks from: from :data:`LOWEST_PORT` to just below the
    ephemeral range; None when there is no such range or no room below it."""
    ephemeral = ephemeral_range(path)
    if ephemeral is None or ephemeral[0] - LOWEST_PORT < 1000:
        return None
    return range(LOWEST_PORT, ephemeral[0])


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1", candidates: Sequence[int] | None = None) -> int:
    """A TCP port on ``host`` that nothing was bound to at the moment of the call, outside the
    kernel's ephemeral range and not handed out before by this process (see the module's text).

    Args:
        host: the address the server will listen on.
        candidates: the ports to pick from; default :func:`chosen_range`.
    """
    pool = candidates if candidates is not None else chosen_range()
    if pool is None:
        return _kernel_port(host)
    for _ in range(min(ATTEMPTS, 4 * len(pool))):
        port = pool[_random.randrange(len(pool))]
        with _lock:
            if port in _handed_out:
                continue
            _handed_out.add(port)  # taken or not, never a candidate again in this process
        if _bindable(host, port):
            return port
    return _kernel_port(host)
