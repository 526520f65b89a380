"""A Spark driver that a cluster manager hosts (Kubernetes, YARN): how to name it at submit time
and how to ask the cluster manager's REST API how it is doing.

In cluster deploy mode the driver does not run on the host that called spark-submit, so nothing
there can watch it as a child process. Instead, barrierflow gives the application a name it
chooses before the submit (:func:`cluster_app_for`):

* **Kubernetes**: the driver pod's name (``spark.kubernetes.driver.pod.name``), looked up with
  ``GET /api/v1/namespaces/<namespace>/pods/<name>`` on the API server of the ``k8s://`` master.
  The pod's ``status.phase`` is the state (``Pending``, ``Running``, ``Succeeded``, ``Failed``,
  ``Unknown``); a missing pod (404) is ``missing``.
* **YARN**: an application tag (``spark.yarn.tags``), looked up with
  ``GET /ws/v1/cluster/apps?applicationTags=<tag>`` on the ResourceManager's web address. The
  application's ``state`` and ``finalStatus`` are the state (``FINISHED`` + ``SUCCEEDED`` is
  succeeded; ``FAILED``, ``KILLED`` or a finished application that did not succeed is failed,
  with YARN's ``diagnostics``); no application with the tag is ``missing``.

:meth:`ClusterApp.submit_conf` holds the ``--conf`` entries that give the application its name
and make spark-submit return once the application is submitted (``waitAppCompletion=false``), so
no process has to stay up while the driver runs. :func:`fetch_status` asks once (blocking HTTP,
a few seconds at most); it raises :class:`ClusterAppError` when the cluster manager cannot be
asked (connection refused, an HTTP error other than 404, a reply it cannot read), which a watcher
treats as "look again", never as a verdict.

Credentials: the Kubernetes API is called with the bearer token in ``token_file`` (default: the
pod's service account token, ``/var/run/secrets/kubernetes.io/serviceaccount/token``, or
``$BARRIERFLOW_K8S_TOKEN_FILE``) and the CA in ``ca_file`` (likewise ``ca.crt`` or
``$BARRIERFLOW_K8S_CA_FILE``); no token is ever logged. The YARN ResourceManager is called
without authentication (a Kerberos-secured ResourceManager is not supported here).
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from barrierflow.errors import BarrierflowError

Manager = Literal["kubernetes", "yarn"]
AppState = Literal["pending", "running", "succeeded", "failed", "missing"]

#: The service account files a pod has (Kubernetes' defaults).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Seconds one status request may take.
REQUEST_TIMEOUT_SECONDS = 10.0
#: The longest Kubernetes object name (a DNS-1123 label, which pod names must also satisfy for
#: the driver's service name Spark derives from them).
_K8S_NAME_MAX = 63


class ClusterAppError(BarrierflowError):
    """The cluster manager could not be asked about the application, or the master names none."""


@dataclass(frozen=True)
class ClusterApp:
    """One application on a cluster manager, by the name barrierflow gave it at submit time.

    Attributes:
        manager: ``kubernetes`` or ``yarn``.
        api_url: the Kubernetes API server or the YARN ResourceManager's web address (no
            trailing slash).
        name: the driver pod's name (Kubernetes) or the application tag (YARN).
        namespace: the driver pod's namespace (Kubernetes only).
    """

    manager: Manager
    api_url: str
    name: str
    namespace: str = "default"

    def submit_conf(self) -> dict[str, str]:
        """The spark-submit ``--conf`` entries that name the application and let spark-submit
        return once it is submitted."""
        if self.manager == "kubernetes":
            return {"spark.kubernetes.driver.pod.name": self.name, "spark.kubernetes.namespace": self.namespace,
                    "spark.kubernetes.submission.waitAppCompletion": "false"}
        return {"spark.yarn.tags": self.name, "spark.yarn.submit.waitAppCompletion": "false"}

    def describe(self) -> str:
        """The application for an operator: where to look for it by hand."""
        if self.manager == "kubernetes":
            return f"driver pod {self.namespace}/{self.name} (kubectl -n {self.namespace} describe pod {self.name})"
        return f"YARN application tagged {self.name} (yarn application -list -appTags {self.name})"

    def as_dict(self) -> dict[str, str]:
        return {"manager": self.manager, "api_url": self.api_url, "name": self.name, "namespace": self.namespace}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ClusterApp:
        manager = str(raw["manager"])
        if manager not in ("kubernetes", "yarn"):
            raise ClusterAppError(f"unknown cluster manager {manager!r} (kubernetes or yarn)")
        return cls("kubernetes" if manager == "kubernetes" else "yarn", str(raw["api_url"]), str(raw["name"]),
                   str(raw.get("namespace") or "default"))


@dataclass(frozen=True)
class AppStatus:
    """What the cluster manager says of the application: ``state`` and its own words."""

    state: AppState
    detail: str
    app_id: str | None = None


def _label(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def cluster_app_for(master: str, *, pipeline: str, launch_id: str, namespace: str | None = None,
                    yarn_rm_url: str | None = None) -> ClusterApp:
    """The application a cluster-mode launch of ``pipeline`` submits to ``master``.

    Args:
        master: ``k8s://https://host:port`` or ``yarn``.
        pipeline: the pipeline's name (part of the pod name or tag).
        launch_id: the launch's id (makes the name unique per launch).
        namespace: the driver pod's namespace (Kubernetes; default ``default``).
        yarn_rm_url: the ResourceManager's web address (``host:port`` or a URL), required for YARN.

    Raises:
        ClusterAppError: the master is neither Kubernetes nor YARN, or YARN without a
            ResourceManager address (naming the connection extra to set).
    """
    suffix = _label(launch_id)[-24:].strip("-") or "launch"
    base = _label(f"bf-{pipeline}")[: _K8S_NAME_MAX - len(suffix) - len("--driver")].strip("-")
    name = f"{base}-{suffix}"
    if master.startswith("k8s://"):
        api = master[len("k8s://"):]
        api = api if "://" in api else f"https://{api}"
        return ClusterApp("kubernetes", api.rstrip("/"), f"{name}-driver", namespace or "default")
    if master.startswith("yarn"):
        if not yarn_rm_url:
            raise ClusterAppError(
                "a YARN cluster-mode launch is watched through the ResourceManager's REST API, and its address is "
                "not set: add yarn_resourcemanager_webapp_address (e.g. http://rm.example.com:8088) to the Spark "
                "connection's extra")
        url = yarn_rm_url if "://" in yarn_rm_url else f"http://{yarn_rm_url}"
        return ClusterApp("yarn", url.rstrip("/"), name)
    raise ClusterAppError(f"master {master!r} hosts no driver: cluster deploy mode is watched on Kubernetes (k8s://) "
                          "or YARN; on a standalone master or local, use client deploy mode")


def kubernetes_pod_status(pod: dict[str, Any]) -> AppStatus:
    """The status of a driver pod object (``GET .../pods/<name>``)."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Unknown")
    reasons = [str(status[k]) for k in ("reason", "message") if status.get(k)]
    for container in status.get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated:
            reasons.append(f"container {container.get('name')} exit code {terminated.get('exitCode')}"
                           + (f" ({terminated['reason']})" if terminated.get("reason") else ""))
    detail = f"pod phase {phase}" + (": " + "; ".join(reasons) if reasons else "")
    uid = (pod.get("metadata") or {}).get("uid")
    state: AppState = {"Pending": "pending", "Running": "running", "Succeeded": "succeeded",
                       "Failed": "failed"}.get(phase, "pending")
    return AppStatus(state, detail, str(uid) if uid else None)


def yarn_app_status(reply: dict[str, Any]) -> AppStatus:
    """The status of the newest application in a ResourceManager ``/ws/v1/cluster/apps`` reply."""
    apps = ((reply.get("apps") or {}).get("app")) or []
    if not apps:
        return AppStatus("missing", "no application with this tag")
    app = max(apps, key=lambda a: int(a.get("startedTime") or 0))
    state, final = str(app.get("state") or ""), str(app.get("finalStatus") or "UNDEFINED")
    detail = f"application {app.get('id')} state {state}, final status {final}"
    if app.get("diagnostics"):
        detail += f": {str(app['diagnostics']).strip()}"
    if state in ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED"):
        return AppStatus("pending", detail, app.get("id"))
    if state == "RUNNING":
        return AppStatus("running", detail, app.get("id"))
    if state == "FINISHED" and final == "SUCCEEDED":
        return AppStatus("succeeded", detail, app.get("id"))
    return AppStatus("failed", detail, app.get("id"))


def _read_json(url: str, headers: dict[str, str], context: ssl.SSLContext | None) -> dict[str, Any] | None:
    """GET ``url`` as JSON; None on 404."""
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS, context=context) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise ClusterAppError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ClusterAppError(f"{url}: {getattr(exc, 'reason', exc)}") from exc
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise ClusterAppError(f"{url}: the reply is not JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise ClusterAppError(f"{url}: the reply is not a JSON object")
    return parsed


def _kubernetes_credentials(token_file: str | None, ca_file: str | None) -> tuple[dict[str, str], ssl.SSLContext]:
    token_path = token_file or os.environ.get("BARRIERFLOW_K8S_TOKEN_FILE") or f"{SERVICE_ACCOUNT_DIR}/token"
    ca_path = ca_file or os.environ.get("BARRIERFLOW_K8S_CA_FILE") or f"{SERVICE_ACCOUNT_DIR}/ca.crt"
    headers: dict[str, str] = {}
    if os.path.exists(token_path):
        with open(token_path, encoding="utf-8") as handle:
            headers["Authorization"] = f"Bearer {handle.read().strip()}"
    context = ssl.create_default_context(cafile=ca_path if os.path.exists(ca_path) else None)
    return headers, context


def fetch_status(app: ClusterApp, *, token_file: str | None = None, ca_file: str | None = None) -> AppStatus:
    """Ask the cluster manager once how ``app`` is doing (blocking; see the module docstring).

    Raises:
        ClusterAppError: the cluster manager could not be asked or its reply not read.
    """
    if app.manager == "kubernetes":
        headers, context = _kubernetes_credentials(token_file, ca_file)
        url = (f"{app.api_url}/api/v1/namespaces/{urllib.parse.quote(app.namespace)}/pods/"
               f"{urllib.parse.quote(app.name)}")
        pod = _read_json(url, headers, context if url.startswith("https:") else None)
        return AppStatus("missing", "no such pod") if pod is None else kubernetes_pod_status(pod)
    url = f"{app.api_url}/ws/v1/cluster/apps?applicationTags={urllib.parse.quote(app.name)}"
    reply = _read_json(url, {}, None)
    return AppStatus("missing", "no application with this tag") if reply is None else yarn_app_status(reply)
