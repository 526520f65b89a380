"""Airflow plugin: the barrierflow Checkpoints page (registration only).

Mounts the read-only app of :mod:`barrierflow.ui` under ``/barrierflow`` and shows it in the
UI under Browse -> Checkpoints (``/plugin/checkpoints``). The page lists the pipelines of
``$BARRIERFLOW_PIPELINES_DIR`` (default ``$BARRIERFLOW_HOME/pipelines``, as the DAG file); relative paths
in specs resolve against ``$BARRIERFLOW_HOME`` (default: the project root). Every request needs
an Airflow session: 401 without one.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from barrierflow.ops.discovery import pipelines_folder
from barrierflow.ui import URL_PREFIX, VIEW_ROUTE, create_app

PROJECT_ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("BARRIERFLOW_HOME", str(PROJECT_ROOT))  # as the DAG file's tasks do
PIPELINES_DIR = str(pipelines_folder(os.environ["BARRIERFLOW_HOME"]))  # as the DAG file


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
