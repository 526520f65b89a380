"""A transactional Kafka producer (confluent-kafka / librdkafka) with bounded calls.

:class:`TransactionalProducer` is what the exactly-once Kafka sink produces an epoch with:
``begin`` a transaction, ``send`` its records (real producer batches: ``linger.ms``,
``batch.size``, idempotence), ``settle`` (every record sent so far acknowledged, and the
offset span each partition got), ``commit`` or ``abort``. Constructing it runs
``init_transactions`` for its ``transactional.id``, which fences any older producer of the
same id (a crashed or hung driver) and aborts the transaction it left open.

Keys are placed with ``murmur2_random``: the Java client's partitioner (and kafka-python's),
so a key lands in the same partition whichever client wrote it.

Every call is bounded by ``settings.timeout`` seconds. Failures raise :class:`TransactionError`
whose ``kind`` says what to do:

- ``fenced``: another producer initialised the same ``transactional.id`` (a newer driver);
  this one can never commit again, close it;
- ``unreachable``: the brokers did not answer within the bound; retry later with a new
  producer (the open transaction is aborted by its ``init_transactions``);
- ``refused``: the broker refused the request for good (unknown topic, authorization, a
  record too large): retrying does not help until the cause is fixed.

Contract: one thread uses a producer; after any :class:`TransactionError` the caller closes
the producer and builds a new one for the next attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from barrierflow.kafka_io.errors import KafkaIOError, KafkaSecurityError
from barrierflow.kafka_io.security import librdkafka_client_config, librdkafka_failure

if TYPE_CHECKING:
    from barrierflow.spec.kafka_params import KafkaClient

log = logging.getLogger(__name__)

Kind = Literal["fenced", "unreachable", "refused"]
#: Records sent between two polls of the delivery-report queue.
POLL_EVERY = 5_000
#: The longest single ``init_transactions`` call (seconds): between two, a refused login the
#: error callback heard is raised (:meth:`TransactionalProducer._init_transactions`).
INIT_SLICE_SECONDS = 1.0


class TransactionError(KafkaIOError):
    """A transactional call failed; ``kind`` is ``fenced``, ``unreachable`` or ``refused``."""

    def __init__(self, message: str, *, kind: Kind) -> None:
        super().__init__(message, retriable=kind == "unreachable")
        self.kind: Kind = kind


class TransactionSecurityError(TransactionError, KafkaSecurityError):
    """A transactional call failed because the brokers refused the producer's credentials or
    certificate, or it does not trust theirs (``kind`` ``refused``; the message says which setting)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="refused")


@dataclass(frozen=True)
class TransactionalSettings:
    """How a :class:`TransactionalProducer` connects.

    Attributes:
        servers: the bootstrap ``host:port`` list, comma separated.
        transactional_id: stable per writer (the same after a restart, so it fences the old one).
        transaction_timeout_ms: the broker aborts a transaction left open this long.
        timeout: seconds each call (connect, init, send, settle, commit, abort) may take.
        client_id: the Kafka client id.
        linger_ms: how long a partition's batch waits for more records.
        client: security and client options (secrets as references, resolved by :meth:`config`).
    """

    servers: str
    transactional_id: str
    transaction_timeout_ms: int = 60_000
    timeout: float = 10.0
    client_id: str = "barrierflow"
    linger_ms: int = 5
    client: KafkaClient | None = None

    def config(self) -> dict[str, Any]:
        """The librdkafka configuration."""
        timeout_ms = max(1000, int(self.timeout * 1000))
        return librdkafka_client_config(self.servers, self.client_id, self.client, {
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": self.linger_ms,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 500_000,
            "partitioner": "murmur2_random",
            "message.timeout.ms": min(2 * timeout_ms, self.transaction_timeout_ms),
            "socket.timeout.ms": timeout_ms,
            "request.timeout.ms": timeout_ms,
        })


def _kind(error: Any) -> Kind:
    """The :data:`Kind` of a librdkafka ``KafkaError``."""
    from confluent_kafka import KafkaError

    fenced = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    code = error.code()
    if code in fenced:
        return "fenced"
    if code == KafkaError._FATAL:
        return "fenced" if "fenced" in error.str().lower() or "epoch" in error.str().lower() else "refused"
    unreachable = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                   KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_COORDINATOR,
                   KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                   KafkaError._RESOLVE, KafkaError._WAIT_COORD}
    if code in unreachable or (error.retriable() and not error.fatal()):
        return "unreachable"
    return "refused"


def _cause(exc: BaseException) -> Any | None:
    """The librdkafka ``KafkaError`` behind ``exc`` (confluent-kafka wraps an exception raised
    in a callback into a SystemError whose cause is the original), or None."""
    from confluent_kafka import KafkaException

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args:
            return seen.args[0]
        seen = seen.__cause__ or seen.__context__
    return None


class TransactionalProducer:
    """See the module docstring."""

    def __init__(self, settings: TransactionalSettings) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        self._failures: list[Any] = []
        self._ranges: dict[int, list[int]] = {}
        self._unsettled = 0
        try:
            config = settings.config()
        except KafkaSecurityError as exc:  # a secret or TLS file that does not resolve
            raise TransactionSecurityError(str(exc)) from exc
        config["error_cb"] = self._on_error
        config["logger"] = log
        self._last_error = ""
        #: The fatal error librdkafka reported (fenced, ...): the producer can do nothing more.
        self._fatal: Any | None = None
        #: The brokers refused the producer's credentials or certificate (or it theirs).
        self._security: KafkaSecurityError | None = None
        try:
            self._producer = Producer(config)
        except Exception as exc:  # KafkaException: a setting the client refuses
            found = librdkafka_failure(settings.client, settings.servers, exc.args[0]) \
                if exc.args and hasattr(exc.args[0], "code") else None
            if found is not None:
                raise TransactionSecurityError(str(found)) from exc
            raise TransactionError(f"creating a transactional producer for {settings.servers} failed: {exc}",
                                   kind="refused") from exc
        self._init_transactions()

    def _init_transactions(self) -> None:
        """``init_transactions`` for the transactional id within ``settings.timeout``, asked in
        slices of at most :data:`INIT_SLICE_SECONDS`: librdkafka hands a refused login to the
        error callback only when the producer is polled, and ``init_transactions`` does not poll,
        so one call for the whole timeout would report a wrong password only at its end.
        Between slices the callback is served; a security failure it heard is raised then. A
        slice that ends in a retriable error (its own timeout, a coordinator still loading) is
        followed by the next, as librdkafka retries within one call, until the timeout."""
        what = "initialising the transactional id"
        deadline = time.monotonic() + self.settings.timeout
        while True:
            left = deadline - time.monotonic()
            try:
                self._producer.init_transactions(max(min(INIT_SLICE_SECONDS, left), 0.001))
                return
            except Exception as exc:
                error = _cause(exc)
                if error is None or not error.retriable() or time.monotonic() >= deadline:
                    raise self._error(what, exc) from exc
                self._producer.poll(0.05)  # serves the error callback; a short pause before the next slice
                if self._security is not None:
                    raise TransactionSecurityError(f"{what}: {self._security}") from None

    # -- calls ---------------------------------------------------------------------------

    def begin(self) -> None:
        """Begin a transaction (offset spans start afresh)."""
        self._ranges = {}
        self._failures = []
        self._call("beginning a transaction", self._producer.begin_transaction)

    def send(self, topic: str, value: bytes, *, key: bytes | None = None,
             headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Queue one record of the open transaction (partition by key, else sticky)."""
        producer = self._producer
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=list(headers), on_delivery=self._delivered)
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.05)
            except Exception as exc:
                raise self._error(f"sending a record to {topic!r}", exc) from exc
        self._unsettled += 1
        if self._unsettled % POLL_EVERY == 0:
            producer.poll(0)

    def settle(self) -> dict[int, tuple[int, int]]:
        """Wait until every record sent in this transaction is acknowledged; each partition's
        ``(first, last)`` acknowledged offset so far.

        Raises:
            TransactionError: a record failed, or was not acknowledged within the timeout.
        """
        left = self._call("flushing the records", lambda: self._producer.flush(self.settings.timeout))
        if self._failures:
            error = self._failures[0]
            raise TransactionError(f"producing to {self.settings.servers}: {error.str()}", kind=_kind(error))
        if left:
            last = f" (last broker error: {self._last_error})" if self._last_error else ""
            raise TransactionError(f"{left} records were not acknowledged by {self.settings.servers} within "
                                   f"{self.settings.timeout:g}s{last}", kind="unreachable")
        self._unsettled = 0
        return {p: (span[0], span[1]) for p, span in self._ranges.items()}

    def commit(self) -> None:
        """Commit the open transaction (its records become visible to ``read_committed``)."""
        self._call("committing the transaction", lambda: self._producer.commit_transaction(self.settings.timeout))

    def abort(self) -> None:
        """Abort the open transaction (its records are never visible to ``read_committed``)."""
        self._call("aborting the transaction", lambda: self._producer.abort_transaction(self.settings.timeout))

    def close(self) -> None:
        """Drop the producer without waiting (an open transaction is aborted by the broker's
        timeout or the next ``init_transactions`` of the same id)."""
        try:
            self._producer.purge()
            self._producer.flush(0)
        except Exception:  # closing a producer of dead brokers: nothing to keep
            log.debug("closing a transactional producer", exc_info=True)

    # -- internals -----------------------------------------------------------------------

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._failures.append(error)
            return
        span = self._ranges.setdefault(message.partition(), [message.offset(), message.offset()])
        offset = message.offset()
        if offset < span[0]:
            span[0] = offset
        elif offset > span[1]:
            span[1] = offset

    def _on_error(self, error: Any) -> None:
        self._last_error = error.str()
        if self._security is None:
            self._security = librdkafka_failure(self.settings.client, self.settings.servers, error)
        if error.fatal():
            self._fatal = error

    def _call(self, what: str, call: Any) -> Any:
        try:
            return call()
        except Exception as exc:
            raise self._error(what, exc) from exc

    def _probe(self) -> Any | None:
        """The error behind a bare SystemError: the fatal error the error callback got once its
        queue is served, else the one an abort of the open transaction raises (the caller
        discards this producer after any error, so aborting costs nothing)."""
        try:
            self._producer.poll(0)  # serves the error callback that carries a fatal error
        except Exception:  # the producer is failing; what poll raises adds nothing
            log.debug("polling a failed producer", exc_info=True)
        if self._fatal is not None:
            return self._fatal
        try:
            self._producer.abort_transaction(min(self.settings.timeout, 5.0))
        except Exception as exc:
            return _cause(exc)
        return None

    def _error(self, what: str, exc: BaseException) -> TransactionError:
        try:
            self._producer.poll(0)  # serves the error callback, which hears why a login failed
        except Exception:  # the producer is failing; what poll raises adds nothing
            log.debug("polling a failed producer", exc_info=True)
        if self._security is not None:
            return TransactionSecurityError(f"{what}: {self._security}")
        # After a fatal error (a newer producer fenced this one) a call may fail with a bare
        # SystemError ("returned NULL without setting an exception", confluent-kafka 2.16):
        # the fatal error the error callback got is then the cause.
        error = _cause(exc) or self._fatal
        if error is None and isinstance(exc, SystemError):
            error = self._probe()
        if error is None:
            return TransactionError(f"{what} on {self.settings.servers} failed: {type(exc).__name__}: {exc}",
                                    kind="refused")
        kind = _kind(error)
        if kind == "unreachable" and self._last_error and self._last_error not in error.str():
            detail = f"{error.str()} (last broker error: {self._last_error})"
        else:
            detail = error.str()
        return TransactionError(f"{what} for transactional id {self.settings.transactional_id!r} on "
                                f"{self.settings.servers} failed: {detail}", kind=kind)
