"""Cluster deploy mode (Kubernetes, YARN): the launch submits under a name of its choosing and
defers to a trigger that asks the cluster manager's REST API.

No Kubernetes or YARN runs here. A stand-in on 127.0.0.1 answers the two requests the watch makes
the way the real APIs do (Kubernetes: ``GET /api/v1/namespaces/<ns>/pods/<name>`` over TLS with a
bearer token, a pod object or 404; YARN: ``GET /ws/v1/cluster/apps?applicationTags=<tag>``, the
ResourceManager's apps document), with states the test scripts. The pipeline's lease and
checkpoints are real files in a real checkpoint store; the clock is the test's; spark-submit is a
stand-in script that records its arguments and prints what Spark's Kubernetes submit prints."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import os
import ssl
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from barrierflow.airflow.cluster_supervision import ClusterAppWatchTrigger
from barrierflow.local_ports import free_port
from barrierflow.ops.cluster_watch import decide_cluster, observe_cluster
from barrierflow.pipeline.model import open_pipeline
from barrierflow.spark.cluster_apps import ClusterApp, ClusterAppError, cluster_app_for, fetch_status

from tests.airflow.test_pipeline_watch import write_lease
from tests.pipeline_specs import spec_dict, write_spec
from tests.verification.checkpoint_factory import CheckpointFactory

STALL, LOST = 60.0, 90.0
TOKEN = "sa-token-for-the-stand-in"


class ClusterManagerStandIn:
    """Answers as the Kubernetes API (pods) and the YARN ResourceManager (apps by tag) do.

    ``replies[path]`` is a list of (status, document) popped per request; the last one stays.
    Every request's path and Authorization header are kept in ``requests``."""

    def __init__(self, tls: tuple[Path, Path] | None) -> None:
        self.replies: dict[str, list[tuple[int, dict[str, Any] | None]]] = {}
        self.requests: list[tuple[str, str | None]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parsed = urlparse(self.path)
                key = parsed.path
                if parsed.path == "/ws/v1/cluster/apps":
                    key += "?" + ",".join(parse_qs(parsed.query).get("applicationTags", []))
                stand_in.requests.append((key, self.headers.get("Authorization")))
                queue = stand_in.replies.get(key) or [(404, {"kind": "Status", "code": 404})]
                status, document = queue.pop(0) if len(queue) > 1 else queue[0]
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.url = f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (the stand-in API server's), also the client's CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "api.crt", tmp_path / "api.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def kubernetes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClusterManagerStandIn]:
    """The Kubernetes stand-in over TLS; the service account's token and CA in the environment."""
    cert, key = self_signed(tmp_path)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    monkeypatch.setenv("BARRIERFLOW_K8S_TOKEN_FILE", str(token))
    monkeypatch.setenv("BARRIERFLOW_K8S_CA_FILE", str(cert))
    stand_in = ClusterManagerStandIn((cert, key))
    yield stand_in
    stand_in.close()


@pytest.fixture
def yarn() -> Iterator[ClusterManagerStandIn]:
    stand_in = ClusterManagerStandIn(None)
    yield stand_in
    stand_in.close()


def pod(phase: str, *, exit_code: int | None = None, reason: str | None = None) -> tuple[int, dict[str, Any]]:
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "spark-kubernetes-driver", "state": {
            "terminated": {"exitCode": exit_code, "reason": reason or "Error"}}}]
    return 200, {"kind": "Pod", "metadata": {"name": "p", "uid": "uid-1"}, "status": status}


def yarn_apps(state: str, final: str = "UNDEFINED", diagnostics: str = "") -> tuple[int, dict[str, Any]]:
    return 200, {"apps": {"app": [{"id": "application_1_0007", "state": state, "finalStatus": final,
                                   "diagnostics": diagnostics, "startedTime": 1}]}}


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    return write_spec(tmp_path, spec_dict(tmp_path), "t.yaml")


@pytest.fixture
def checkpoint_time(tmp_path: Path, spec_path: Path) -> tuple[int, datetime]:
    [manifest] = CheckpointFactory(tmp_path, ledger_sink=False).take(1)
    newest = open_pipeline(spec_path).newest_cut()
    assert newest is not None and newest.checkpoint_id == manifest.checkpoint_id
    return manifest.checkpoint_id, newest.completion_time


# -- naming the application --------------------------------------------------------------------


def test_the_application_is_named_before_the_submit_and_spark_submit_does_not_wait() -> None:
    app = cluster_app_for("k8s://https://10.0.0.1:6443", pipeline="User Totals_v2", launch_id="20261202T1200-ab12cd34",
                          namespace="streams")
    assert app.manager == "kubernetes" and app.api_url == "https://10.0.0.1:6443" and app.namespace == "streams"
    assert app.name == "bf-user-totals-v2-20261202t1200-ab12cd34-driver" and len(app.name) <= 63
    assert app.submit_conf() == {"spark.kubernetes.driver.pod.name": app.name, "spark.kubernetes.namespace": "streams",
                                 "spark.kubernetes.submission.waitAppCompletion": "false"}
    long = cluster_app_for("k8s://h:6443", pipeline="x" * 100, launch_id="L1")
    assert len(long.name) <= 63 and long.api_url == "https://h:6443"
    on_yarn = cluster_app_for("yarn", pipeline="t", launch_id="L1", yarn_rm_url="rm:8088")
    assert on_yarn.api_url == "http://rm:8088" and on_yarn.submit_conf() == {
        "spark.yarn.tags": on_yarn.name, "spark.yarn.submit.waitAppCompletion": "false"}
    assert ClusterApp.from_dict(on_yarn.as_dict()) == on_yarn
    with pytest.raises(ClusterAppError, match="yarn_resourcemanager_webapp_address"):
        cluster_app_for("yarn", pipeline="t", launch_id="L1")
    with pytest.raises(ClusterAppError, match="client deploy mode"):
        cluster_app_for("spark://h:7077", pipeline="t", launch_id="L1")


# -- asking the cluster manager ----------------------------------------------------------------


def test_a_driver_pod_is_read_over_tls_with_the_service_account_token(kubernetes: ClusterManagerStandIn) -> None:
    app = ClusterApp("kubernetes", kubernetes.url, "bf-t-l1-driver", "streams")
    path = "/api/v1/namespaces/streams/pods/bf-t-l1-driver"
    kubernetes.replies[path] = [pod("Pending"), pod("Running"), pod("Failed", exit_code=137, reason="OOMKilled"),
                                (500, {"message": "etcd timeout"})]
    assert fetch_status(app).state == "pending"
    assert fetch_status(app).state == "running"
    failed = fetch_status(app)
    assert failed.state == "failed" and "exit code 137 (OOMKilled)" in failed.detail and failed.app_id == "uid-1"
    with pytest.raises(ClusterAppError, match="HTTP 500"):
        fetch_status(app)
    assert fetch_status(ClusterApp("kubernetes", kubernetes.url, "gone", "streams")).state == "missing"
    assert {auth for _, auth in kubernetes.requests} == {f"Bearer {TOKEN}"}


def test_a_yarn_application_is_found_by_its_tag(yarn: ClusterManagerStandIn) -> None:
    app = ClusterApp("yarn", yarn.url, "bf-t-l1")
    key = "/ws/v1/cluster/apps?bf-t-l1"
    yarn.replies[key] = [yarn_apps("ACCEPTED"), yarn_apps("RUNNING"), yarn_apps("FINISHED", "SUCCEEDED"),
                         yarn_apps("FINISHED", "FAILED", "User class threw exception: boom"),
                         yarn_apps("KILLED", "KILLED"), (200, {"apps": None})]
    assert [fetch_status(app).state for _ in range(3)] == ["pending", "running", "succeeded"]
    failed = fetch_status(app)
    assert failed.state == "failed" and "boom" in failed.detail and failed.app_id == "application_1_0007"
    assert fetch_status(app).state == "failed"
    assert fetch_status(app).state == "missing"
    with pytest.raises(ClusterAppError, match=r"127\.0\.0\.1:1"):
        fetch_status(ClusterApp("yarn", "http://127.0.0.1:1", "t"))


# -- the verdicts --------------------------------------------------------------------------------


def look(app: ClusterApp, spec_path: Path, submitted: datetime, now: datetime) -> dict[str, str]:
    return decide_cluster(observe_cluster(app, str(spec_path), submitted, now=now), stall_after=STALL, lost_after=LOST)


def test_the_cluster_managers_state_decides_the_end_and_the_checkpoints_the_progress(
        kubernetes: ClusterManagerStandIn, spec_path: Path, checkpoint_time: tuple[int, datetime]) -> None:
    cid, at = checkpoint_time
    app = ClusterApp("kubernetes", kubernetes.url, "d", "ns")
    path = "/api/v1/namespaces/ns/pods/d"
    submitted = at - timedelta(seconds=30)
    write_lease(spec_path, submitted, at + timedelta(seconds=20))

    kubernetes.replies[path] = [pod("Running")]
    running = look(app, spec_path, submitted, at + timedelta(seconds=STALL - 1))
    assert running["outcome"] == "running" and f"checkpoint {cid}" in running["message"]
    stalled = look(app, spec_path, submitted, at + timedelta(seconds=STALL + 5))
    assert stalled["outcome"] == "stalled" and f"checkpoint {cid}" in stalled["message"]
    assert "pod phase Running" in stalled["message"] and "kubectl -n ns describe pod d" in stalled["message"]

    kubernetes.replies[path] = [pod("Pending")]
    assert look(app, spec_path, at, at + timedelta(seconds=STALL - 1))["outcome"] == "running"
    pending = look(app, spec_path, at, at + timedelta(seconds=STALL + 1))
    assert pending["outcome"] == "stalled" and "has not started" in pending["message"]

    kubernetes.replies[path] = [pod("Succeeded", exit_code=0, reason="Completed")]
    assert look(app, spec_path, submitted, at + timedelta(hours=5))["outcome"] == "finished"
    kubernetes.replies[path] = [pod("Failed", exit_code=1)]
    failed = look(app, spec_path, submitted, at)
    assert failed["outcome"] == "failed" and "exit code 1" in failed["message"] and "recovery DAG" in failed["message"]

    kubernetes.replies.pop(path)  # 404
    assert look(app, spec_path, at, at + timedelta(seconds=LOST - 1))["outcome"] == "running"
    missing = look(app, spec_path, at, at + timedelta(seconds=LOST + 1))
    assert missing["outcome"] == "failed" and "has no driver pod ns/d" in missing["message"]


def test_the_trigger_survives_serialization_and_an_unreachable_api_and_fires_once(
        yarn: ClusterManagerStandIn, tmp_path: Path, spec_path: Path, checkpoint_time: tuple[int, datetime],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARRIERFLOW_HOME", str(tmp_path))
    _, at = checkpoint_time
    app = ClusterApp("yarn", yarn.url, "bf-t-l1")
    yarn.replies["/ws/v1/cluster/apps?bf-t-l1"] = [
        yarn_apps("RUNNING"), (503, {"RemoteException": {"message": "standby"}}), yarn_apps("RUNNING"),
        yarn_apps("FINISHED", "FAILED", "Application attempt failed 2 times")]
    trigger = ClusterAppWatchTrigger(app=app.as_dict(), spec_path=str(spec_path), barrierflow_home=str(tmp_path),
                                     submitted_at=(at - timedelta(seconds=5)).isoformat(), stall_after_seconds=STALL,
                                     lost_after_seconds=LOST, poll_seconds=0.01)
    classpath, kwargs = trigger.serialize()
    assert classpath == "barrierflow.airflow.cluster_supervision.ClusterAppWatchTrigger"
    rebuilt = ClusterAppWatchTrigger(**kwargs)
    monkeypatch.setattr(ClusterAppWatchTrigger, "now", staticmethod(lambda: at + timedelta(seconds=10)))
    event = asyncio.run(anext(rebuilt.run()))
    assert event.payload["outcome"] == "failed" and "failed 2 times" in event.payload["message"]
    assert event.payload["app_id"] == "application_1_0007" and event.payload["app"] == app.as_dict()
    assert len(yarn.requests) == 4  # running, unreachable (looked again), running, failed


# -- the launch task in cluster deploy mode ------------------------------------------------------


def test_the_launch_submits_named_without_waiting_then_defers_to_the_cluster_watch(
        tmp_path: Path, spec_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On YARN (the Spark provider builds a hook for a ``k8s://`` master only with the cncf.kubernetes
    provider installed, which this environment does not have; the Kubernetes side differs only in
    the names of :meth:`ClusterApp.submit_conf`, checked above)."""
    from airflow.sdk.exceptions import TaskDeferred
    from barrierflow.airflow.launch import PipelineSubmitOperator

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args_file = tmp_path / "spark-submit.args"
    script = bin_dir / "spark-submit"
    script.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > " + str(args_file) + "\n"
                      "echo \"26/12/02 12:00:00 INFO Client: Submitted application application_1_0007\"\n",
                      encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER_TEST", json.dumps({
        "conn_type": "spark", "host": "yarn",
        "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": "rm.example.com:8088"}}))
    launch = PipelineSubmitOperator(task_id="launch", application="job.py", conn_id="spark_cluster_test",
                                    name="barrierflow-t", spec_path=str(spec_path), spec_master="local[1]",
                                    recovery_dag_id="barrierflow_recover__t",
                                    env_vars={"BARRIERFLOW_HOME": str(tmp_path)})
    hook = launch._get_hook()
    assert hook._connection["deploy_mode"] == "cluster"
    with pytest.raises(TaskDeferred) as deferred:
        launch._submit_to_cluster_and_defer(hook, {"params": {"stall_after_seconds": 120}})
    trigger = deferred.value.trigger
    assert isinstance(trigger, ClusterAppWatchTrigger) and deferred.value.method_name == "execute_complete"
    app = ClusterApp.from_dict(trigger.app)
    assert app.manager == "yarn" and app.api_url == "http://rm.example.com:8088"
    assert app.name.startswith("bf-barrierflow-t-")
    submitted = args_file.read_text(encoding="utf-8").splitlines()
    confs = {submitted[i + 1] for i, arg in enumerate(submitted) if arg == "--conf"}
    assert f"spark.yarn.tags={app.name}" in confs and "spark.yarn.submit.waitAppCompletion=false" in confs
    assert submitted[submitted.index("--deploy-mode") + 1] == "cluster"
    assert trigger.stall_after_seconds == 120 and trigger.barrierflow_home == str(tmp_path)
    assert datetime.fromisoformat(trigger.submitted_at).tzinfo is not None
