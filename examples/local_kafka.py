"""Start barrierflow's embedded Kafka broker (Apache Kafka, KRaft, from the jars ``make install``
pins) on 127.0.0.1 for trying the examples; Ctrl-C stops it.

    .venv/bin/python examples/local_kafka.py [DATA_DIR]

It prints ``export KAFKA_BOOTSTRAP=127.0.0.1:PORT`` once the broker answers. Its records live in
DATA_DIR (default: a temporary directory, removed when it stops).
"""

from __future__ import annotations

import sys
import threading

from barrierflow.sources.embedded_broker import embedded_broker


def main() -> None:
    data_dir = sys.argv[1] if len(sys.argv) > 1 else None
    with embedded_broker(data_dir) as bootstrap:
        sys.stdout.write(f"export KAFKA_BOOTSTRAP={bootstrap}\n")
        sys.stdout.flush()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
