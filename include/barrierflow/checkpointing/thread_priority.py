"""CPU priority of the asynchronous phase's threads (``checkpoint.async_nice``).

ABS keeps processing going while a snapshot is uploaded, but on a machine whose cores the job
keeps busy, the upload's own CPU (hashing, the S3 client) is still taken from processing.
:func:`background_executor` returns a thread pool whose threads lower their own CPU priority
(Linux: the nice value of the thread, ``setpriority(PRIO_PROCESS, tid)``) as they start, so
the scheduler gives them the CPU that processing leaves first.

Contract:

* ``nice`` 0 changes nothing; with 1-19 each pool thread runs at the nice value of the thread
  that created the pool plus ``nice`` (at most 19), wherever it was started from (pools start
  threads lazily, e.g. from another pool's thread). A thread already lower is left alone: an
  unprivileged process may always lower its priority, never raise it back.
* Only the pool's own threads change; the caller's thread and every other thread keep theirs.
* Where the OS has no per-thread nice value (not Linux) or refuses it, the pool works as a
  plain pool and a warning names the setting once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

_warned = threading.Event()


def _thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _set_thread_nice(target: int | None) -> None:
    """Pool thread initializer: lower the calling thread to nice value ``target``."""
    if target is None:
        return
    try:
        if _thread_nice() < target:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), target)
    except OSError as exc:
        _warn_once(f"setpriority refused: {exc}")


def _target(nice: int) -> int | None:
    """The nice value for pool threads ``nice`` steps below the calling thread; None: unchanged."""
    if nice <= 0:
        return None
    if not sys.platform.startswith("linux"):
        _warn_once(f"per-thread CPU priority needs Linux (this is {sys.platform})")
        return None
    try:
        return min(19, _thread_nice() + nice)
    except OSError as exc:
        _warn_once(f"getpriority refused: {exc}")
        return None


def _warn_once(why: str) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning("checkpoint.async_nice is ignored: %s; the asynchronous phase runs at the priority of "
                    "processing", why)


def lower_calling_thread(nice: int) -> None:
    """Run the calling thread ``nice`` steps below its current CPU priority (at most 19), for a
    thread that is not in a :func:`background_executor` pool; 0 changes nothing."""
    _set_thread_nice(_target(nice))


def background_executor(max_workers: int, thread_name_prefix: str, nice: int) -> ThreadPoolExecutor:
    """A thread pool whose threads run ``nice`` steps below the calling thread's CPU priority."""
    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix,
                              initializer=_set_thread_nice, initargs=(_target(nice),))
