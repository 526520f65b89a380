"""The errors of the Kafka client layer, and what a kafka-python error says (:func:`is_connectivity`,
:func:`is_fenced`)."""

from __future__ import annotations

from barrierflow.errors import BarrierflowError


class KafkaIOError(BarrierflowError):
    """A Kafka request failed: the brokers did not answer within the bound, or refused it.

    Attributes:
        retriable: True when the cause is (probably) transient: brokers that do not answer,
            timed-out requests; False when the broker refused the request for good.
    """

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class KafkaSecurityError(KafkaIOError):
    """The client could not connect securely: the brokers refused its credentials or its
    certificate, it does not trust theirs, they do not speak the configured protocol or
    mechanism, or a secret reference or TLS file of its ``client`` settings does not resolve
    where it runs. Never retriable: retrying does not help until the setting is fixed. The
    message names the brokers and the setting, never a secret."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message, retriable=False)


def is_connectivity(exc: BaseException) -> bool:
    """Whether ``exc`` of a kafka-python call says the brokers could not be reached (not that they refused)."""
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError

    # kafka-python 3 reports a failed bootstrap as KafkaTimeoutError (2.x: NoBrokersAvailable).
    return isinstance(exc, KafkaTimeoutError | KafkaConnectionError | NodeNotReadyError | RequestTimedOutError) \
        or type(exc).__name__ == "NoBrokersAvailable"


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` says another producer of the same transactional id fenced this one."""
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    return isinstance(exc, ProducerFencedError | InvalidProducerEpochError) or "ProducerFenced" in str(exc)
