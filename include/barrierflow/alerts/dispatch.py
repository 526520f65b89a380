"""Dispatch: one alert to every destination of the spec's ``alerts`` block that takes its kind.

Contract of :func:`dispatch`:

1. The destinations whose ``events`` list the alert's kind are chosen; none: nothing is done.
2. Each is delivered in a thread of its own (a webhook POST, :mod:`barrierflow.alerts.webhook`;
   a user callable called with the :class:`~barrierflow.alerts.alert.Alert`), all at once.
3. :func:`dispatch` waits for them until ``alerts.timeout`` seconds after it started, no longer:
   a destination that has not finished by then is reported as not answering and left to finish
   in its (daemon) thread.
4. Each outcome is logged on this module's logger: INFO when delivered, WARNING naming the
   destination (a webhook by where its URL comes from, never the URL) and the cause when not.
   :func:`dispatch` returns the outcomes and never raises: an alert that cannot be sent must not
   fail or hold up the pipeline, or the Airflow task it is about.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from barrierflow.alerts.alert import Alert, AlertKind
from barrierflow.alerts.errors import AlertDeliveryError
from barrierflow.alerts.webhook import post_alert

if TYPE_CHECKING:
    from barrierflow.spec.alerts import AlertsSpec, CallableDestinationSpec, DestinationSpec

__all__ = ["Delivery", "dispatch", "send_alert"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """What became of an alert at one destination."""

    destination: str
    delivered: bool
    detail: str


def _call_user_function(alert: Alert, destination: CallableDestinationSpec) -> str:
    module_name, _, attr = destination.function.partition(":")
    try:
        function: Callable[[Alert], Any] = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AlertDeliveryError(destination.describe(), f"cannot import it ({type(exc).__name__}: {exc}); check "
                                 "alerts.destinations[].function and that its package is installed where the "
                                 "alert is sent (the Airflow worker, the driver's host)") from None
    try:
        function(alert)
    except Exception as exc:  # the user's code: whatever it raises is its delivery failing
        raise AlertDeliveryError(destination.describe(), f"it raised {type(exc).__name__}: {exc}") from None
    return "called"


def _deliver(alert: Alert, destination: DestinationSpec, timeout: float) -> str:
    if destination.type == "webhook":
        return f"HTTP {post_alert(alert, destination, timeout)}"
    return _call_user_function(alert, destination)


def dispatch(alert: Alert, alerts: AlertsSpec | None) -> list[Delivery]:
    """Send ``alert`` to each destination of ``alerts`` that takes its kind, within
    ``alerts.timeout`` seconds; see the module docstring. Never raises."""
    if alerts is None:
        return []
    chosen = [d for d in alerts.destinations if d.takes(alert.kind.value)]
    outcomes: dict[int, Delivery] = {}

    def deliver(index: int, destination: DestinationSpec) -> None:
        name = destination.describe()
        try:
            outcomes[index] = Delivery(name, True, _deliver(alert, destination, alerts.timeout))
        except AlertDeliveryError as exc:
            outcomes[index] = Delivery(name, False, exc.reason)
        except Exception as exc:  # a bug must not escape into the pipeline either
            outcomes[index] = Delivery(name, False, f"unexpected {type(exc).__name__}")

    threads = [threading.Thread(target=deliver, args=(i, d), daemon=True, name=f"alert-{alert.kind.value}-{i}")
               for i, d in enumerate(chosen)]
    deadline = time.monotonic() + alerts.timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    deliveries = []
    for index, destination in enumerate(chosen):
        delivery = outcomes.get(index) or Delivery(destination.describe(), False,
                                                   f"no answer within {alerts.timeout:g} s (alerts.timeout)")
        deliveries.append(delivery)
        if delivery.delivered:
            log.info("alert %s of pipeline %s sent to %s (%s)", alert.kind.value, alert.pipeline, delivery.destination,
                     delivery.detail)
        else:
            log.warning("alert %s of pipeline %s NOT delivered to %s: %s", alert.kind.value, alert.pipeline,
                        delivery.destination, delivery.detail)
    return deliveries


def send_alert(pipeline: str, alerts: AlertsSpec | None, kind: AlertKind, message: str,
               **fields: Any) -> list[Delivery]:
    """Build the alert (its runbook link from ``alerts.runbook``) and :func:`dispatch` it. Never raises."""
    if alerts is None:
        return []
    return dispatch(Alert.of(pipeline, kind, message, runbook=alerts.runbook, **fields), alerts)
