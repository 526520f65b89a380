"""The generic JSON webhook: the alert's payload POSTed to a URL that is a secret.

The URL comes from where the destination's spec says, read when the alert is sent:

* ``url_env``: the environment variable of that name holds the whole URL;
* ``conn_id``: the Airflow connection of that id (read with ``airflow.sdk.Connection.get``, so
  any secrets backend works, and outside Airflow's workers the ``AIRFLOW_CONN_<ID>`` variable).
  The URL is the connection's password when that is a whole ``http(s)://`` URL; otherwise its
  host (a whole URL, or a host name with the connection's schema, default ``https``, and port)
  followed by the password as the rest of the path, Slack's convention: host
  ``https://hooks.slack.com/services``, password ``T000/B000/XXXX``. Keep the token in the
  password: Airflow masks it in task logs.

The URL never leaves this module: no log line, no error message and no exception chained to
a :class:`~barrierflow.alerts.errors.AlertDeliveryError` contains it (errors of the HTTP client
are re-worded without it, and raised ``from None``). A response other than 2xx is a failed
delivery; the body of the response is not read beyond its status.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from barrierflow.alerts.errors import AlertDeliveryError

if TYPE_CHECKING:
    from barrierflow.alerts.alert import Alert
    from barrierflow.spec.alerts import WebhookDestinationSpec

__all__ = ["post_alert", "webhook_url"]

USER_AGENT = "barrierflow-alerts/1"


def webhook_url(destination: WebhookDestinationSpec) -> str:
    """The destination's URL, from its environment variable or Airflow connection.

    Raises:
        AlertDeliveryError: the variable is unset or empty, the connection cannot be read or
            holds no http(s) URL (the message names the variable or connection, never a URL).
    """
    if destination.url_env:
        url = os.environ.get(destination.url_env, "").strip()
        if not url:
            raise AlertDeliveryError(destination.describe(), f"the environment variable {destination.url_env} is not "
                                     "set (or empty) in this process: set it to the webhook's URL")
    else:
        url = _connection_url(destination.conn_id)
    if not url.startswith(("http://", "https://")):
        raise AlertDeliveryError(destination.describe(), "the URL found there does not start with http:// or "
                                 "https://; set the whole webhook URL")
    return url


def _connection_url(conn_id: str) -> str:
    where = f"webhook (Airflow connection {conn_id})"
    try:
        from airflow.sdk import Connection
    except ImportError:
        raise AlertDeliveryError(where, "Airflow is not installed in this process: use url_env (an environment "
                                 "variable) for alerts sent outside Airflow") from None
    try:
        conn = Connection.get(conn_id)
    except Exception as exc:  # AirflowNotFoundException and the secrets backends' own errors
        raise AlertDeliveryError(where, f"the connection cannot be read ({type(exc).__name__}): define it "
                                 f"(Admin > Connections, or AIRFLOW_CONN_{conn_id.upper()})") from None
    password = (conn.password or "").strip()
    if password.startswith(("http://", "https://")):
        return password
    host = (conn.host or "").strip().rstrip("/")
    if not host:
        raise AlertDeliveryError(where, "the connection has neither a whole URL in its password nor a host")
    base = host if "://" in host else f"{conn.schema or 'https'}://{host}{f':{conn.port}' if conn.port else ''}"
    return f"{base}/{password.lstrip('/')}" if password else base


def post_alert(alert: Alert, destination: WebhookDestinationSpec, timeout: float) -> int:
    """POST ``alert.payload()`` as JSON to the destination's URL; return the HTTP status.

    ``timeout`` bounds the connection and each read (the dispatcher bounds the whole).

    Raises:
        AlertDeliveryError: no URL, the endpoint cannot be reached or does not answer in time, or
            it answers with a status other than 2xx (the message names the destination by where
            its URL comes from, and the cause; never the URL).
    """
    url = webhook_url(destination)
    body = json.dumps(alert.payload(), default=str).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
        exc.close()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        detail = str(reason).replace(url, "<url>") or type(reason).__name__
        raise AlertDeliveryError(destination.describe(), f"the endpoint cannot be reached: {detail}") from None
    if not 200 <= status < 300:
        raise AlertDeliveryError(destination.describe(), f"the endpoint answered HTTP {status}")
    return status
