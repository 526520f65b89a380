"""The error of the Kafka client layer."""

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
