"""The errors of the alerts package. The dispatcher logs them and never raises them to its
caller: an alert that cannot be sent must not fail the pipeline or the task it is about."""

from __future__ import annotations

from barrierflow.errors import BarrierflowError

__all__ = ["AlertDeliveryError"]


class AlertDeliveryError(BarrierflowError):
    """An alert did not reach one destination.

    Attributes:
        destination: the destination as logs name it (a webhook by where its URL comes from,
            never by the URL).
        reason: why, with the fix where there is one.
    """

    def __init__(self, destination: str, reason: str) -> None:
        self.destination = destination
        self.reason = reason
        super().__init__(f"alert not delivered to {destination}: {reason}")
