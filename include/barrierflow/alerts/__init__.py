"""Alerts an on-call engineer can act on: one alert type, one dispatcher, two kinds of destination.

Design. An alert is raised where the event is seen, and all of them take the same way out:

* :mod:`.alert` — :class:`~.alert.Alert` (pipeline, kind, cause, what to do, runbook link,
  Airflow's DAG/run/task where it comes from Airflow, a timezone-aware time) and its JSON payload;
* :mod:`.dispatch` — :func:`~.dispatch.dispatch`: the alert to each destination of the spec's
  ``alerts`` block that takes its kind, within a bounded time, never raising;
* :mod:`.webhook` — the generic JSON webhook, its URL (a secret) read from the environment or an
  Airflow connection when the alert is sent, never logged;
* :mod:`.errors` — :class:`~.errors.AlertDeliveryError`, what the dispatcher logs.

Where the events are seen: the Airflow side attaches a notifier to every task of a pipeline's
DAGs (``on_failure_callback``, :mod:`barrierflow.airflow.notifier`), which turns the task's
failure into a ``task_failure``, ``checkpoint_age`` (the supervision check) or ``verification``
alert by the error that failed it; the restart supervisor of ``barrierflow run``
(:mod:`barrierflow.ops.supervised_run`) sends ``restart`` before each restart and ``gave_up``
when its strategy allows no more. The configuration is the spec's (:mod:`barrierflow.spec.alerts`),
so the same block serves both sides. Airflow's own notifiers (Slack, e-mail, ...) remain usable
beside it: they are added to the DAGs, not to the spec.

This package imports nothing of Airflow (the connection is read through ``airflow.sdk`` only when
a webhook's URL comes from one), so the driver can send alerts where Airflow is not installed.
"""

from barrierflow.alerts.alert import PAYLOAD_VERSION, Alert, AlertKind
from barrierflow.alerts.dispatch import Delivery, dispatch, send_alert
from barrierflow.alerts.errors import AlertDeliveryError

__all__ = ["PAYLOAD_VERSION", "Alert", "AlertDeliveryError", "AlertKind", "Delivery", "dispatch", "send_alert"]
