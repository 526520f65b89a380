"""Local processes: whether one still runs (the one check the job lease and the embedded Kafka
broker, :mod:`barrierflow.kafka_io.kraft_broker`, share) and this process's environment set for
the length of a block. It imports nothing of barrierflow, so every layer may use it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine and has not exited. A zombie (exited, not
    yet reaped by its parent) counts as gone; a process of another user counts as running."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no /proc (not Linux): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


@contextlib.contextmanager
def temporary_environment(settings: Mapping[str, str]) -> Iterator[None]:
    """While in the block, ``os.environ`` has ``settings``; afterwards each of those variables is
    as before (unset again if it was unset), also when the block raises."""
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
