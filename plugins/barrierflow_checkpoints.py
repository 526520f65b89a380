"""Airflow plugin: the barrierflow Checkpoints page (registration only).

Mounts the read-only app of :mod:`barrierflow.ui` under ``/barrierflow`` and shows it in the
UI under Browse -> Checkpoints (``/plugin/checkpoints``). The page lists the pipelines of
``$BARRIERFLOW_PIPELINES_DIR`` (default ``include/pipelines``, as the DAG file); relative paths
in specs resolve against ``$BARRIERFLOW_HOME`` (default: the project root). Every request needs
an Airflow session: 401 without one.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from barrierflow.ui import URL_PREFIX, VIEW_ROUTE, create_app

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PIPELINES_DIR = os.environ.get("BARRIERFLOW_PIPELINES_DIR") or str(PROJECT_ROOT / "include" / "pipelines")
os.environ.setdefault("BARRIERFLOW_HOME", str(PROJECT_ROOT))  # as the DAG file's tasks do


class BarrierflowCheckpointsPlugin(AirflowPlugin):
    name = "barrierflow_checkpoints"
    fastapi_apps = [{"app": create_app(PIPELINES_DIR), "url_prefix": URL_PREFIX, "name": "barrierflow checkpoints"}]
    external_views = [{
        "name": "Checkpoints",
        "href": f"{URL_PREFIX}/",
        "url_route": VIEW_ROUTE,
        "category": "browse",
        "destination": "nav",
    }]
