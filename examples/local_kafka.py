"""Start barrierflow's embedded Kafka broker (Apache Kafka, KRaft, from the jars ``make install``
pins) on 127.0.0.1 for trying the examples.

    .venv/bin/python examples/local_kafka.py [DATA_DIR] &
    ...
    kill %1            # or: kill PID (the pid it printed); Ctrl-C when it runs in the foreground

It prints ``export KAFKA_BOOTSTRAP=127.0.0.1:PORT`` once the broker answers, then the command that
stops it. SIGTERM, SIGHUP and SIGINT (Ctrl-C) all stop the broker and end the script with exit
code 0. Its records live in DATA_DIR (default: a temporary directory, removed when it stops).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from barrierflow.kafka_io.embedded_broker import EmbeddedBrokerError, embedded_broker


def main(argv: list[str]) -> int:
    """Run the broker until SIGTERM, SIGHUP or SIGINT; 0 after a clean stop, 2 when it cannot start."""
    data_dir = argv[0] if argv else None
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # A job started with `&` from a script ignores SIGINT, so Ctrl-C cannot be the only way.
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, request_stop)
    try:
        with embedded_broker(data_dir) as bootstrap:
            sys.stdout.write(f"export KAFKA_BOOTSTRAP={bootstrap}\n"
                             f"# stop it with: kill {os.getpid()}\n")
            sys.stdout.flush()
            stop.wait()
    except EmbeddedBrokerError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    sys.stderr.write("the Kafka broker stopped\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
