"""The embedded Kafka broker of channels with ``bootstrap: embedded``: Apache Kafka itself.

:func:`embedded_broker` runs a single-node Apache Kafka (KRaft) from the pinned jars
(:mod:`barrierflow.kafka_io.kraft_broker`; ``make install`` fetches and verifies them) on
127.0.0.1 on free ports, yields its ``host:port`` once it answers a metadata request and stops
it on exit. Why Apache Kafka and not a smaller Kafka-protocol broker: docs/architecture.md
(bench/results/embedded-broker/).

Its records live in a data dir. ``barrierflow run`` of a pipeline with embedded channels gives
it ``<work_dir>/embedded-broker`` (:func:`data_dir_for`), so committed channel records,
transaction state and committed consumer offsets survive a stop and start, and a killed
multi-stage pipeline restarts from its latest global checkpoint with the same command. Without
a data dir (the tests) it uses a temporary one, removed on exit.

The broker runs in a session (process group) of its own, so a SIGKILL of the run's process
group (``barrierflow chaos``, a supervisor's ``kill -9 -PGID``) does not reach it, and it gets
SIGTERM when the process that started it dies (start it from a thread that lives as long as
it). A start that finds the data dir held by a killed run's broker waits for it to exit; one
held by a live run's broker is refused.

Its JVM runs with :data:`~barrierflow.kafka_io.kraft_broker.DEFAULT_JVM_OPTIONS` unless
``$BARRIERFLOW_EMBEDDED_BROKER_JAVA_OPTIONS`` gives others (space-separated, replacing them: a
larger heap for a busy channel, or, as the test suite does, C1 only for a broker that lives
seconds).

It lives in :mod:`barrierflow.kafka_io`, the home of everything that talks to Kafka, below the
sources, sinks, runtime and ``ops`` that start it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

from barrierflow.errors import BarrierflowError
from barrierflow.kafka_io import kraft_broker as kraft

#: The environment variable whose JVM options replace the embedded broker's defaults.
JAVA_OPTIONS_ENV = "BARRIERFLOW_EMBEDDED_BROKER_JAVA_OPTIONS"
#: The broker's directory under a pipeline's work dir (see :func:`data_dir_for`).
WORK_DIR_ENTRY = "embedded-broker"
broker_answers = kraft.broker_answers


class EmbeddedBrokerError(BarrierflowError):
    """The embedded broker could not be started or did not become ready."""


def java_options() -> tuple[str, ...]:
    """The embedded broker's JVM options: ``$BARRIERFLOW_EMBEDDED_BROKER_JAVA_OPTIONS`` split like
    a shell would, or the defaults when it is unset or blank (EmbeddedBrokerError naming the
    variable when it cannot be split)."""
    try:
        given = shlex.split(os.environ.get(JAVA_OPTIONS_ENV, ""))
    except ValueError as exc:  # an unclosed quote
        raise EmbeddedBrokerError(f"${JAVA_OPTIONS_ENV} cannot be read as JVM options ({exc}): give them "
                                  f"space-separated, quoting an option that holds spaces, or unset it "
                                  f"for the defaults") from exc
    return tuple(given) if given else kraft.DEFAULT_JVM_OPTIONS


def data_dir_for(work_dir: str | os.PathLike[str]) -> Path:
    """Where a pipeline's embedded broker keeps its data: ``<work_dir>/embedded-broker``."""
    return Path(work_dir) / WORK_DIR_ENTRY


#: ``host:port`` -> process id of each embedded broker this process runs (outage tests pause it).
_RUNNING: dict[str, int] = {}


def broker_pid(bootstrap: str) -> int | None:
    """The process id of the embedded broker at ``bootstrap`` started by this process, if any."""
    return _RUNNING.get(bootstrap)


@contextlib.contextmanager
def embedded_broker(data_dir: str | os.PathLike[str] | None = None, startup_timeout: float = 60.0,
                    stop_timeout: float = 15.0, takeover_timeout: float = 60.0) -> Iterator[str]:
    """Start Apache Kafka on 127.0.0.1 with its data in ``data_dir`` (a temporary dir, removed
    on exit, if None); yield ``host:port`` once it answers; stop it on exit (also on an
    exception or KeyboardInterrupt).

    Raises:
        EmbeddedBrokerError: Kafka's jars are not installed (the message says ``make install``);
            another running pipeline's broker holds ``data_dir`` (or a killed run's broker did
            not exit within ``takeover_timeout``); the broker exited early (the message carries
            its log); or it did not answer within ``startup_timeout`` seconds.
    """
    stack = contextlib.ExitStack()
    try:
        broker = stack.enter_context(kraft.kraft_broker(
            data_dir, startup_timeout=startup_timeout, stop_timeout=stop_timeout, takeover_timeout=takeover_timeout,
            jvm_options=java_options()))
    except kraft.KafkaBrokerStartError as exc:
        raise EmbeddedBrokerError(f"the embedded Kafka broker: {exc}") from exc
    with stack:
        _RUNNING[broker.bootstrap_servers] = broker.pid
        try:
            yield broker.bootstrap_servers
        finally:
            _RUNNING.pop(broker.bootstrap_servers, None)
