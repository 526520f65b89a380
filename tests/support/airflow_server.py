"""A throwaway Airflow for tests: scheduler, DAG processor and API server on 127.0.0.1.

What a user runs, started the way ``airflow standalone`` starts it, in a temporary
``AIRFLOW_HOME``: SQLite metadata database, LocalExecutor, the given DAGs folder, the simple
auth manager with one admin whose password is generated here, and a JWT secret shared by the
three processes (the scheduler's workers call the API server's execution API with it). Each
process runs in its own process group, so stopping the server also stops every task process
and whatever they started (spark-submit and its driver).

Readiness is asked of the API server (``/api/v2/monitor/health``: the scheduler and the DAG
processor report heartbeats), never waited for by sleeping blindly.

:meth:`stop` then :meth:`start` restarts every component on the same home, port and secrets
(a restart of all of Airflow). ``components`` starts fewer processes (e.g. only
``("api-server",)`` for a UI test: ready when the API server answers and its metadata
database is healthy) or adds the triggerer (asset watchers, deferred tasks);
``plugins_folder`` sets ``AIRFLOW__CORE__PLUGINS_FOLDER`` (default: Airflow's,
``$AIRFLOW_HOME/plugins``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from barrierflow.local_ports import free_port

from tests.support.processes import log_tail

COMPONENTS = ("scheduler", "dag-processor", "api-server")
#: Started only when asked for: the triggerer runs the asset watchers (``barrierflow.airflow.assets``).
OPTIONAL_COMPONENTS = ("triggerer",)


class AirflowServer:
    """Start with :meth:`start`, stop with :meth:`stop` (also a context manager)."""

    def __init__(self, home: Path, dags_folder: Path, *, env: Mapping[str, str] | None = None,
                 parallelism: int = 4, plugins_folder: Path | None = None,
                 components: tuple[str, ...] = COMPONENTS) -> None:
        unknown = set(components) - set(COMPONENTS) - set(OPTIONAL_COMPONENTS)
        if unknown or "api-server" not in components:
            raise ValueError(f"components must include 'api-server' and be among {COMPONENTS + OPTIONAL_COMPONENTS}, "
                             f"got {components}")
        self.home = home
        self.components = components
        self.dags_folder = dags_folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        bin_dir = str(Path(sys.executable).parent)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        self.env = {
            **base,
            "PATH": f"{bin_dir}{os.pathsep}{base.get('PATH', '')}",  # airflow, spark-submit of this venv
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            **({"AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder)} if plugins_folder else {}),
            **(env or {}),
        }
        self._token: str | None = None

    # -- life cycle ---------------------------------------------------------------------

    def start(self, timeout: float = 180, *, migrate: bool = True) -> AirflowServer:
        """Start the components and wait until they are healthy. ``migrate=False`` skips ``airflow
        db migrate`` (a restart on a home this server already migrated)."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({"admin": self.password}), encoding="utf-8")
        airflow = str(Path(sys.executable).parent / "airflow")
        if migrate:
            migrated = subprocess.run([airflow, "db", "migrate"], env=self.env, capture_output=True, text=True,
                                      timeout=300, check=False)
            if migrated.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed ({migrated.returncode}): {migrated.stderr[-3000:]}")
        for name in self.components:
            self._spawn(name)
        self.wait_for(self._healthy, timeout, f"Airflow's {', '.join(self.components)} to be healthy")
        return self

    def _spawn(self, name: str) -> None:
        airflow = str(Path(sys.executable).parent / "airflow")
        with open(self.home / f"{name}.log", "ab") as log:  # the child keeps its own descriptor
            self.procs[name] = subprocess.Popen([airflow, name], env=self.env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def kill_component(self, name: str) -> None:
        """SIGKILL one component's whole process group (with the task processes it started), as a
        crash would; :meth:`start_component` starts it again."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def start_component(self, name: str, timeout: float = 180) -> None:
        """Start one component again (after :meth:`kill_component`) and wait until all are healthy."""
        self._spawn(name)
        self.wait_for(self._healthy, timeout, f"Airflow's {name} to be healthy again")

    def stop(self, timeout: float = 30) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # task processes and spark-submit left in the group
            except ProcessLookupError:
                pass
            proc.wait(timeout=timeout)

    def __enter__(self) -> AirflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def logs(self, limit: int = 3000) -> str:
        return "\n".join(f"--- {name} ---\n{log_tail(self.home / f'{name}.log', limit)}" for name in self.components)

    # -- waiting --------------------------------------------------------------------------

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> Any:
        """Poll ``condition`` until it returns something truthy; fail naming ``what`` with the logs.
        A request of ``condition`` that times out or cannot connect counts as "not yet"."""
        import requests

        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"airflow {name} exited with {proc.returncode} while waiting for {what}\n"
                                       f"{self.logs()}")
            try:
                value = condition()
            except (requests.Timeout, requests.ConnectionError) as exc:  # a loaded API server answers late
                value, slow = None, exc
            else:
                slow = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}"
                                   f"{f' (last: {slow})' if slow else ''}\n{self.logs()}")
            time.sleep(interval)

    def _healthy(self) -> bool:
        import requests

        try:
            health = requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        parts = ["metadatabase", *(c for c in ("scheduler", "triggerer") if c in self.components)]
        return all(health.get(part, {}).get("status") == "healthy" for part in parts)

    # -- the REST API -------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT for the admin, from the login endpoint (as a REST client gets one)."""
        import requests

        if self._token is None:
            response = requests.post(f"{self.url}/auth/token", json={"username": "admin", "password": self.password},
                                     timeout=30)
            response.raise_for_status()
            self._token = str(response.json()["access_token"])
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call ``/api/v2{path}`` authenticated; returns the response (not raised for status)."""
        import requests

        headers = {"Authorization": f"Bearer {self.token()}"}
        return requests.request(method, f"{self.url}/api/v2{path}", headers=headers, timeout=30, **kwargs)

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a run of ``dag_id`` through the REST API; returns its run id."""
        response = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": dict(conf or {})})
        if response.status_code != 200:
            raise RuntimeError(f"triggering {dag_id} answered {response.status_code}: {response.text}")
        return str(response.json()["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        response = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        response.raise_for_status()
        return str(response.json()["state"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float, states: tuple[str, ...] = ("success", "failed")
                     ) -> str:
        """Wait until run ``run_id`` of ``dag_id`` is in one of ``states``; returns the state."""
        def done() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in states else None

        return str(self.wait_for(done, timeout, f"run {run_id} of {dag_id} to reach {states}", interval=1.0))

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        response = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        response.raise_for_status()
        return dict(response.json())

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        response = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
        response.raise_for_status()
        return response.json()["value"]

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        response = self.api("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after", "limit": 100})
        response.raise_for_status()
        return list(response.json()["dag_runs"])
